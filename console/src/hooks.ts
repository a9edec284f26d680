// Reading one JSON resource for a page, again every `everyMs` if given.

import { useEffect, useState } from 'preact/hooks';
import { asApiError, json, type ApiError } from './api';

export function usePoll<T>(path: string, everyMs?: number): { data: T | null; error: ApiError | null } {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  useEffect(() => {
    const abort = new AbortController();
    let timer: number | undefined;
    const read = async () => {
      try {
        setData(await json<T>(path, { signal: abort.signal }));
        setError(null);
      } catch (e) {
        if (!abort.signal.aborted) setError(asApiError(e));
      }
      if (everyMs && !abort.signal.aborted) timer = window.setTimeout(read, everyMs);
    };
    void read();
    return () => {
      abort.abort();
      window.clearTimeout(timer);
    };
  }, [path, everyMs]);
  return { data, error };
}

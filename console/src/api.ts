// The one way the console talks to the server: `fetch` with the session's
// cookie (same origin), the CSRF header on every request that is not
// GET/HEAD, and errors as `ApiError` carrying the envelope's code.

import type { ErrorBody, SandboxInfo, SandboxList } from './types';

/** An error answer of the server (`{"error": {"code", "message"}}`), or a
 * failure to reach it (`code` `network`). */
export class ApiError extends Error {
  readonly code: string;
  readonly status: number;
  readonly body: ErrorBody;

  constructor(status: number, body: ErrorBody) {
    super(body.message);
    this.name = 'ApiError';
    this.code = body.code;
    this.status = status;
    this.body = body;
  }
}

/** Anything thrown, as an `ApiError` (for the alert regions). */
export function asApiError(e: unknown): ApiError {
  if (e instanceof ApiError) return e;
  const message = e instanceof Error ? e.message : String(e);
  return new ApiError(0, { code: 'client', message });
}

let csrf: string | null = null;
let unauthorized: () => void = () => {};

/** The session's CSRF token (from login or `GET /ui/api/session`). */
export function setCsrf(token: string | null): void {
  csrf = token;
}

/** What to do when a call answers 401: the app goes back to the login. */
export function onUnauthorized(f: () => void): void {
  unauthorized = f;
}

export interface Request {
  method?: string;
  /** JSON-encoded unless it is a `Blob` (sent as is). */
  body?: unknown;
  signal?: AbortSignal;
  /** Leave a 401 to the caller (login, session) instead of logging out. */
  quiet401?: boolean;
}

async function errorOf(res: Response): Promise<ApiError> {
  let body: ErrorBody | undefined;
  try {
    const json = (await res.json()) as { error?: ErrorBody };
    if (json && typeof json.error?.code === 'string') body = json.error;
  } catch {
    // Not the envelope: described by the status below.
  }
  return new ApiError(
    res.status,
    body ?? { code: `http_${res.status}`, message: `${res.status} ${res.statusText}`.trim() },
  );
}

/** `fetch` with the console's rules; resolves to the `Response` when it is
 * 2xx, else throws `ApiError`. */
export async function request(path: string, req: Request = {}): Promise<Response> {
  const method = req.method ?? 'GET';
  const headers: Record<string, string> = {};
  let body: BodyInit | undefined;
  if (req.body instanceof Blob) {
    body = req.body;
    headers['Content-Type'] = 'application/octet-stream';
  } else if (req.body !== undefined) {
    body = JSON.stringify(req.body);
    headers['Content-Type'] = 'application/json';
  }
  if (method !== 'GET' && method !== 'HEAD' && csrf) headers['X-Burrow-Csrf'] = csrf;
  let res: Response;
  try {
    res = await fetch(path, {
      method,
      headers,
      body,
      credentials: 'same-origin',
      signal: req.signal,
    });
  } catch (e) {
    if (e instanceof DOMException && e.name === 'AbortError') throw e;
    throw new ApiError(0, { code: 'network', message: `The server cannot be reached (${String(e)})` });
  }
  if (res.ok) return res;
  const err = await errorOf(res);
  if (res.status === 401 && !req.quiet401) unauthorized();
  throw err;
}

/** A JSON answer (`null` for 204). */
export async function json<T>(path: string, req: Request = {}): Promise<T> {
  const res = await request(path, req);
  if (res.status === 204) return null as T;
  return (await res.json()) as T;
}

/** A path segment, escaped. */
export const seg = encodeURIComponent;

/** Every sandbox. The list has no paging today (`SandboxList`); should the
 * server add a cursor, its `next_cursor` is followed. Also gives the
 * server's clock at the answer (`Date`), to tell replayed events from
 * new ones. */
export async function listSandboxes(
  signal?: AbortSignal,
): Promise<{ sandboxes: SandboxInfo[]; serverNow: number }> {
  const all: SandboxInfo[] = [];
  let cursor: string | null = null;
  let serverNow = 0;
  for (;;) {
    const q: string = cursor ? `?cursor=${encodeURIComponent(cursor)}` : '';
    const [page, at] = await jsonAt<SandboxList & { next_cursor?: string | null }>(
      `/v1/sandboxes${q}`,
      { signal },
    );
    if (!cursor) serverNow = at;
    all.push(...page.sandboxes);
    cursor = page.next_cursor ?? null;
    if (!cursor) return { sandboxes: all, serverNow };
  }
}

export const getSandbox = (id: string, signal?: AbortSignal) =>
  json<SandboxInfo>(`/v1/sandboxes/${seg(id)}`, { signal });

/** A JSON answer with the server's clock at the answer (`Date`, else the
 * browser's). */
export async function jsonAt<T>(path: string, req: Request = {}): Promise<[T, number]> {
  const res = await request(path, req);
  const date = Date.parse(res.headers.get('Date') ?? '');
  return [(await res.json()) as T, Number.isFinite(date) ? date : Date.now()];
}

export const ACTIONS = ['start', 'stop', 'restart', 'drain', 'destroy'] as const;
export type Action = (typeof ACTIONS)[number];

/** SIGTERM to SIGKILL of a stop or restart: the library's default. */
const GRACE_MS = 10_000;

/** `POST /v1/sandboxes/{id}/{action}`: a stop or restart with the default
 * grace, the others with `{}`. */
export const act = (id: string, action: Action) =>
  json<unknown>(`/v1/sandboxes/${seg(id)}/${action}`, {
    method: 'POST',
    body: action === 'stop' || action === 'restart' ? { grace_ms: GRACE_MS } : {},
  });

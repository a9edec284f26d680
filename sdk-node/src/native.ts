// The native module (`burrow.node`, the binding core) and the one way to
// call it: an operation as JSON, an optional AbortSignal, errors as the
// SDK's classes. Internal (not re-exported).

import type { CallOptions, Status } from "./types";
import { BurrowError, ERROR_CLASSES, type ErrorBody } from "./errors";

// eslint-disable-next-line @typescript-eslint/no-var-requires
export const native: Native = require("../../burrow.node");

export interface NativeObject {
  readonly kind: "sandbox" | "process" | "logs" | "file_reader" | "file_writer";
  readonly id: string | null;
  readonly name: string | null;
  readonly live: boolean;
  readonly generation: number;
  /** A sandbox's status as the core made the object (a lookup's, a list's, a start's). */
  readonly status: Status | null;
}

interface Native {
  call(callId: number, target: NativeObject | null, op: string, data: Buffer | null): Promise<any>;
  cancel(callId: number): boolean;
  configure(home: string | null): void;
  errorCodes(): string[];
  inFlight(): number;
}


function fromNative(e: unknown): unknown {
  if (!(e instanceof Error)) return e;
  let body: ErrorBody;
  try {
    body = JSON.parse(e.message) as ErrorBody;
  } catch {
    return e;
  }
  if (typeof body?.code !== "string") return e;
  const cls = ERROR_CLASSES[body.code] ?? BurrowError;
  return new cls(body);
}

let nextCall = 0;

export function call(
  target: NativeObject | null,
  op: Record<string, unknown>,
  opts: CallOptions = {},
  data?: Buffer | null,
): Promise<any> {
  opts.signal?.throwIfAborted();
  const body: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(op)) if (v !== undefined) body[k] = v;
  if (opts.timeout !== undefined) body.call_timeout = opts.timeout;
  nextCall = (nextCall % 0xffff_fffe) + 1;
  const id = nextCall;
  const pending = native.call(id, target, JSON.stringify(body), data ?? null);
  const signal = opts.signal;
  if (!signal) return pending.catch((e) => Promise.reject(fromNative(e)));
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      native.cancel(id);
      reject(signal.reason);
    };
    signal.addEventListener("abort", onAbort, { once: true });
    pending.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e) => {
        signal.removeEventListener("abort", onAbort);
        reject(fromNative(e));
      },
    );
  });
}

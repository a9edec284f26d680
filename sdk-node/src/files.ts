// Files as streams: a sandbox's file read as a web ReadableStream (which is
// also async-iterable) and written from any byte source, chunk by chunk,
// with memory flat in the file's size (flow control holds the sandbox's
// side while the application takes its time).

import { ReadableStream } from "node:stream/web";
import type { CallOptions } from "./types";
import { NativeObject, call } from "./native";

/**
 * What `Fs.writeStream` writes: an async iterable of chunks (a Node
 * `Readable`, an async generator), a web `ReadableStream`, a plain iterable
 * of chunks, or the bytes themselves. Chunks are `Uint8Array`s (`Buffer`s)
 * or strings (UTF-8).
 */
export type ByteSource =
  | AsyncIterable<Uint8Array | string>
  | ReadableStream<Uint8Array>
  | Iterable<Uint8Array | string>
  | Uint8Array
  | string;

/** Options of `Fs.openWrite` and `Fs.writeStream`. */
export interface WriteStreamOptions extends CallOptions {
  /** Permission bits of a new file (default 0o644). */
  mode?: number;
  /** Append to the file instead of truncating it. */
  append?: boolean;
}

function asBuffer(chunk: Uint8Array | string): Buffer {
  if (typeof chunk === "string") return Buffer.from(chunk, "utf8");
  if (Buffer.isBuffer(chunk)) return chunk;
  if (chunk instanceof Uint8Array) return Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  throw new TypeError(`expected a Uint8Array or a string chunk, not ${typeof chunk}`);
}

/** The chunks of `source` (see {@link ByteSource}). */
async function* chunksOf(source: ByteSource): AsyncGenerator<Buffer> {
  if (typeof source === "string" || source instanceof Uint8Array) {
    if (source.length > 0) yield asBuffer(source);
    return;
  }
  if (source instanceof ReadableStream || typeof (source as any)?.getReader === "function") {
    const reader = (source as ReadableStream<Uint8Array>).getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        yield asBuffer(value);
      }
    } finally {
      reader.releaseLock();
    }
  }
  if (source != null && typeof (source as any)[Symbol.asyncIterator] === "function") {
    for await (const chunk of source as AsyncIterable<Uint8Array | string>) yield asBuffer(chunk);
    return;
  }
  if (source != null && typeof (source as any)[Symbol.iterator] === "function") {
    for (const chunk of source as Iterable<Uint8Array | string>) yield asBuffer(chunk);
    return;
  }
  throw new TypeError("expected bytes, a string, a ReadableStream or an (async) iterable of chunks");
}

/**
 * A sandbox file being written as a stream (from `Fs.openWrite`): `write`
 * appends (resolving once the sandbox has taken the previous MiB),
 * `finish` completes the file. A failure of the guest (a missing directory,
 * no space) rejects `finish` at the latest. `abandon` (or leaving it
 * unfinished) abandons the write; what was written stays.
 */
export class FileWriter {
  readonly #o: NativeObject;
  /** @internal */
  constructor(o: NativeObject) {
    this.#o = o;
  }
  write(data: Uint8Array | string, opts?: CallOptions): Promise<void> {
    return call(this.#o, { op: "write" }, opts, asBuffer(data));
  }
  /** Ends the file and waits until the sandbox has it: the number of bytes written. */
  async finish(opts?: CallOptions): Promise<number> {
    return Number(await call(this.#o, { op: "finish" }, opts));
  }
  /**
   * Abandons the write at once (a pending `write` ends): the guest's file
   * is closed, what was written stays, and a later `write` or `finish`
   * rejects with `InvalidArgumentError`. Abandoning twice is harmless.
   */
  abandon(opts?: CallOptions): Promise<void> {
    return call(this.#o, { op: "close" }, opts);
  }
}

/**
 * Closes a file stream's object now rather than when it is collected. No
 * signal: the stream may be ending because the caller's signal aborted.
 */
function release(o: NativeObject): Promise<void> {
  return call(o, { op: "close" }).catch(() => {});
}

/** @internal */
export async function openRead(sb: NativeObject, path: string, opts: CallOptions = {}): Promise<ReadableStream<Uint8Array>> {
  let o: NativeObject | null = await call(sb, { op: "fs_open_read", path }, opts);
  // highWaterMark 0: a chunk is read from the sandbox only when the
  // consumer asks for one, so a consumer that stops pulling holds the
  // sandbox's reader, not memory.
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        const obj = o;
        if (obj === null) return;
        let chunk: Buffer | null;
        try {
          chunk = await call(obj, { op: "next" }, opts);
        } catch (e) {
          // A failed (or aborted, or timed out) pull errors the stream:
          // the guest's file is released with it.
          o = null;
          await release(obj);
          throw e;
        }
        // Cancelled meanwhile: the stream is done already.
        if (o === null) return;
        if (chunk === null) {
          o = null;
          controller.close();
        } else {
          controller.enqueue(chunk);
        }
      },
      // A cancel (`reader.cancel()`, a `for await` left early) ends a
      // pending pull at once and releases the guest's file.
      async cancel() {
        const obj = o;
        o = null;
        if (obj !== null) await release(obj);
      },
    },
    { highWaterMark: 0 },
  );
}

/** @internal */
export async function openWrite(sb: NativeObject, path: string, opts: WriteStreamOptions = {}): Promise<FileWriter> {
  return new FileWriter(await call(sb, { op: "fs_open_write", path, mode: opts.mode, append: opts.append }, opts));
}

/** @internal */
export async function writeStream(
  sb: NativeObject,
  path: string,
  source: ByteSource,
  opts: WriteStreamOptions = {},
): Promise<number> {
  const writer = await openWrite(sb, path, opts);
  try {
    for await (const chunk of chunksOf(source)) await writer.write(chunk, opts);
  } catch (e) {
    // The source (or a write, or the signal) failed: the guest stops at
    // once (the abandon without the signal, which may be what aborted).
    await writer.abandon().catch(() => {});
    throw e;
  }
  return writer.finish(opts);
}

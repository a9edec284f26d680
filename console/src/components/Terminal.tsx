// A shell in the sandbox: xterm.js over the console's WebSocket
// (`/ui/api/sandboxes/{id}/terminal?rows=&cols=`). Binary messages are the
// terminal's bytes both ways; text messages are JSON: `{"resize": ...}`
// from here, `{"exit": CODE}` or `{"error": ...}` from the server.

import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, seg } from '../api';
import type { ErrorBody } from '../types';
import { ErrorAlert } from './ErrorAlert';

type XTerm = import('@xterm/xterm').Terminal;

declare global {
  interface Window {
    /** The open terminal (the browser tests read its buffer). */
    __burrowTerm?: XTerm;
  }
}

type State =
  | { s: 'closed'; note?: string }
  | { s: 'opening' }
  | { s: 'open' }
  | { s: 'ended'; note: string };

export function TerminalPanel({ id, running }: { id: string; running: boolean }) {
  const box = useRef<HTMLDivElement>(null);
  const close = useRef<() => void>(() => {});
  const current = useRef<XTerm | null>(null);
  const [state, setState] = useState<State>({ s: 'closed' });
  const [error, setError] = useState<ApiError | null>(null);

  // Leaving the page (or another sandbox) closes it: the shell gets SIGHUP.
  useEffect(
    () => () => {
      close.current();
      current.current?.dispose();
      current.current = null;
    },
    [id],
  );

  const open = async () => {
    const el = box.current;
    if (!el) return;
    setError(null);
    setState({ s: 'opening' });
    const { Terminal, FitAddon } = await import('./xterm');
    // The container is shown once `opening` rendered: measure after that.
    await new Promise((r) => requestAnimationFrame(r));
    const term = new Terminal({
      cursorBlink: true,
      fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace',
      fontSize: 14,
      scrollback: 5_000,
      theme: { background: '#1b1f23', foreground: '#f0f3f6' },
    });
    const fit = new FitAddon();
    term.loadAddon(fit);
    current.current?.dispose();
    current.current = term;
    el.replaceChildren();
    term.open(el);
    fit.fit();
    window.__burrowTerm = term;

    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const q = `rows=${term.rows}&cols=${term.cols}`;
    const ws = new WebSocket(`${proto}//${location.host}/ui/api/sandboxes/${seg(id)}/terminal?${q}`);
    ws.binaryType = 'arraybuffer';
    const enc = new TextEncoder();
    const send = (data: string | Uint8Array) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(data);
    };
    let exited: string | null = null;

    ws.onopen = () => {
      setState({ s: 'open' });
      term.focus();
    };
    ws.onmessage = (m) => {
      if (m.data instanceof ArrayBuffer) {
        term.write(new Uint8Array(m.data));
        return;
      }
      let msg: { exit?: number | null; error?: ErrorBody };
      try {
        msg = JSON.parse(m.data as string);
      } catch {
        return;
      }
      if (msg.error) setError(new ApiError(0, msg.error));
      if (msg && 'exit' in msg) {
        exited = msg.exit == null ? 'The shell ended on a signal.' : `The shell exited with code ${msg.exit}.`;
        term.write(`\r\n[${exited}]\r\n`);
      }
    };
    ws.onclose = (e) => {
      cleanup();
      if (exited) setState({ s: 'ended', note: exited });
      else if (e.code === 1000 || e.code === 1005) setState({ s: 'ended', note: 'The terminal closed.' });
      else {
        const reason = e.reason || (running ? 'the connection failed' : 'the sandbox is not running');
        setError(
          (old) => old ?? new ApiError(0, { code: 'terminal_closed', message: `The terminal closed: ${reason} (${e.code}).` }),
        );
        setState({ s: 'ended', note: 'The terminal closed.' });
      }
    };

    // No keyboard trap: Tab moves on from the terminal until one types in
    // it; from then on Tab is the shell's (completion), and Escape then
    // Tab leaves. Clicking into it starts typing at once.
    let typing = false;
    let escaped = false;
    let pointer = false;
    const onPointer = () => {
      // A click into the terminal is for typing, focused already or not
      // (a focus caused by this click comes before the timeout).
      pointer = true;
      typing = true;
      setTimeout(() => {
        pointer = false;
      }, 0);
    };
    el.addEventListener('pointerdown', onPointer);
    term.textarea?.setAttribute('aria-describedby', 'terminal-keys');
    term.textarea?.addEventListener('focus', () => {
      typing = pointer;
      pointer = false;
      escaped = false;
    });
    term.textarea?.addEventListener('blur', () => {
      typing = false;
    });
    term.attachCustomKeyEventHandler((e) => {
      if (e.key === 'Tab' && (!typing || escaped)) return false;
      if (e.type === 'keydown' && !['Shift', 'Control', 'Alt', 'Meta'].includes(e.key)) {
        escaped = e.key === 'Escape';
        typing = true;
      }
      return true;
    });

    const subs = [
      term.onData((d) => send(enc.encode(d))),
      term.onBinary((d) => send(Uint8Array.from(d, (c) => c.charCodeAt(0) & 0xff))),
      term.onResize(({ rows, cols }) => send(JSON.stringify({ resize: { rows, cols } }))),
    ];
    const resize = new ResizeObserver(() => {
      if (el.clientWidth > 0) fit.fit();
    });
    resize.observe(el);

    // Unhooks the socket and stops resizing; the terminal stays readable
    // until it is opened again.
    let done = false;
    const cleanup = () => {
      if (done) return;
      done = true;
      resize.disconnect();
      el.removeEventListener('pointerdown', onPointer);
      subs.forEach((s) => s.dispose());
    };
    close.current = () => {
      cleanup();
      if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close(1000);
    };
  };

  const active = state.s === 'open' || state.s === 'opening';
  return (
    <section aria-labelledby="terminal-h">
      <h2 id="terminal-h">Terminal</h2>
      <div class="terminal-controls">
        {active ? (
          <button type="button" onClick={() => close.current()}>
            Close terminal
          </button>
        ) : (
          <button type="button" disabled={!running} onClick={() => void open()}>
            Open terminal
          </button>
        )}
        <span role="status" class="muted">
          {state.s === 'opening'
            ? 'Connecting…'
            : state.s === 'open'
              ? 'Connected: a shell in the sandbox.'
              : state.s === 'ended'
                ? state.note
                : running
                  ? ''
                  : 'The terminal needs a running sandbox.'}
        </span>
      </div>
      {active ? (
        <p class="muted" id="terminal-keys">
          Tab moves on from the terminal until you type in it; then Escape, Tab leaves it.
        </p>
      ) : null}
      <ErrorAlert error={error} context="Terminal" />
      <div id="terminal" ref={box} class={state.s === 'closed' ? 'terminal idle' : 'terminal'} />
    </section>
  );
}

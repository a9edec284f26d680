// The lifecycle actions (start, stop, restart, drain, destroy): the
// buttons, the one confirmation dialog of a page, and running the action.

import { memo } from '../memo';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { ACTIONS, act, asApiError, type Action, type ApiError } from '../api';

export const LABEL: Record<Action, string> = {
  start: 'Start',
  stop: 'Stop',
  restart: 'Restart',
  drain: 'Drain',
  destroy: 'Destroy',
};

const WHAT: Record<Action, string> = {
  start: 'starts it.',
  stop: 'stops it gracefully: its processes are asked to end.',
  restart: 'stops it, then starts it again.',
  drain: 'lets in-flight work finish, accepts no new work, then stops it.',
  destroy: 'stops it and removes it with its record. This cannot be undone.',
};

const DOING: Record<Action, string> = {
  start: 'Starting',
  stop: 'Stopping',
  restart: 'Restarting',
  drain: 'Draining',
  destroy: 'Destroying',
};

export interface Target {
  id: string;
  name: string;
}

export interface Ask {
  action: Action;
  target: Target;
}

/** The five buttons of a sandbox, each named `${Action} ${name}` (`bare`:
 * without their box, for a table cell). */
export const ActionButtons = memo(function ActionButtons({
  target,
  onAsk,
  bare = false,
}: {
  target: Target;
  onAsk: (ask: Ask) => void;
  bare?: boolean;
}) {
  const buttons = ACTIONS.map((action) => (
    <button
      key={action}
      type="button"
      class={action === 'destroy' ? 'danger' : undefined}
      aria-label={`${LABEL[action]} ${target.name}`}
      onClick={() => onAsk({ action, target })}
    >
      {LABEL[action]}
    </button>
  ));
  return bare ? <>{buttons}</> : <div class="actions">{buttons}</div>;
});

/** The confirmation of `ask`: a modal `<dialog>` (focus moves into it,
 * Escape cancels), its confirm button named after the action. */
export function ConfirmDialog({
  ask,
  onConfirm,
  onCancel,
}: {
  ask: Ask | null;
  onConfirm: (ask: Ask) => void;
  onCancel: () => void;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const d = ref.current;
    if (!d) return;
    if (ask && !d.open) d.showModal();
    if (!ask && d.open) d.close();
  }, [ask]);
  const done = (ok: boolean) => {
    ref.current?.close();
    if (ok && ask) onConfirm(ask);
    else onCancel();
  };
  return (
    <dialog
      ref={ref}
      class="confirm"
      aria-labelledby="confirm-title"
      aria-describedby="confirm-what"
      onCancel={() => done(false)}
    >
      {ask ? (
        <>
          <h2 id="confirm-title">
            {LABEL[ask.action]} {ask.target.name}?
          </h2>
          <p id="confirm-what">
            {LABEL[ask.action]} <strong>{ask.target.name}</strong> ({ask.target.id}):{' '}
            {WHAT[ask.action]}
          </p>
          <div class="dialog-buttons">
            <button
              type="button"
              class={ask.action === 'destroy' ? 'danger primary' : 'primary'}
              onClick={() => done(true)}
            >
              {LABEL[ask.action]}
            </button>
            <button type="button" autoFocus onClick={() => done(false)}>
              Cancel
            </button>
          </div>
        </>
      ) : null}
    </dialog>
  );
}

/** A page's actions: what to ask, running the confirmed one, its error.
 * `after` runs once the server answered (to refetch what changed). */
export function useActions(after: (ask: Ask, error: ApiError | null) => void) {
  const [ask, setAsk] = useState<Ask | null>(null);
  const [busy, setBusy] = useState<string | null>(null);
  const [error, setError] = useState<{ ask: Ask; error: ApiError } | null>(null);
  const afterRef = useRef(after);
  afterRef.current = after;

  const onConfirm = useCallback(async (a: Ask) => {
    setAsk(null);
    setError(null);
    setBusy(`${DOING[a.action]} ${a.target.name}…`);
    let failed: ApiError | null = null;
    try {
      await act(a.target.id, a.action);
    } catch (e) {
      failed = asApiError(e);
      setError({ ask: a, error: failed });
    } finally {
      setBusy(null);
    }
    afterRef.current(a, failed);
  }, []);
  const onAsk = useCallback((a: Ask) => setAsk(a), []);
  const onCancel = useCallback(() => setAsk(null), []);

  const dialog = <ConfirmDialog ask={ask} onConfirm={onConfirm} onCancel={onCancel} />;
  const context = error ? `${LABEL[error.ask.action]} ${error.ask.target.name}` : undefined;
  return { onAsk, dialog, busy, error: error?.error ?? null, context };
}

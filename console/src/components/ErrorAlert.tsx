import type { ApiError } from '../api';

/** An error of the API in an alert region, with its code on
 * `data-error-code`; nothing without an error. */
export function ErrorAlert({ error, context }: { error: ApiError | null; context?: string }) {
  if (!error) return null;
  return (
    <div class="alert" role="alert" data-error-code={error.code}>
      {context ? <strong>{context}: </strong> : null}
      {error.message} <span class="code">({error.code})</span>
    </div>
  );
}

// The login: an API token in, a session cookie (HttpOnly) and the CSRF
// token for the page out.

import { useState } from 'preact/hooks';
import { asApiError, json, type ApiError } from '../api';
import { ErrorAlert } from '../components/ErrorAlert';
import type { Session } from '../types';

export function Login({ onLogin }: { onLogin: (s: Session) => void }) {
  const [token, setToken] = useState('');
  const [error, setError] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);

  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const s = await json<Session>('/ui/api/login', {
        method: 'POST',
        body: { token: token.trim() },
        quiet401: true,
      });
      setToken('');
      onLogin(s);
    } catch (err) {
      setError(asApiError(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <div class="login">
      <h1 tabIndex={-1}>Log in</h1>
      <p>
        Log in with an API token of this server (<code>burrow serve token create</code>). The
        console acts as that token: its tenant, its role.
      </p>
      <form onSubmit={submit}>
        <div class="field">
          <label for="login-token">API token</label>
          <input
            id="login-token"
            name="token"
            type="password"
            autoComplete="off"
            spellcheck={false}
            required
            value={token}
            onInput={(e) => setToken(e.currentTarget.value)}
          />
        </div>
        <button type="submit" class="primary" disabled={busy}>
          Log in
        </button>
      </form>
      <ErrorAlert error={error} />
    </div>
  );
}

// A files browser on a running sandbox (the console API): list a
// directory, enter one, go up, download a file (a plain link: a GET needs
// no CSRF header), upload a file into the directory shown.

import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { asApiError, json, request, seg, type ApiError } from '../api';
import { bytes } from '../format';
import type { DirEntry, DirListing } from '../types';
import { ErrorAlert } from './ErrorAlert';

/** `dir` joined with `name`. */
export function join(dir: string, name: string): string {
  return `${dir.replace(/\/+$/, '')}/${name}`;
}

/** The directory above `path` (`/` stays `/`). */
export function parent(path: string): string {
  const trimmed = path.replace(/\/+$/, '');
  const i = trimmed.lastIndexOf('/');
  return i <= 0 ? '/' : trimmed.slice(0, i);
}

const MAX_UPLOAD = 64 * 1024 * 1024;

export function Files({ id, running }: { id: string; running: boolean }) {
  const [path, setPath] = useState('/');
  const [listing, setListing] = useState<DirListing | null>(null);
  const [error, setError] = useState<{ what: string; error: ApiError } | null>(null);
  const [note, setNote] = useState('');
  const [busy, setBusy] = useState(false);
  const upload = useRef<HTMLInputElement>(null);
  const base = `/ui/api/sandboxes/${seg(id)}/files`;

  const list = useCallback(
    async (dir: string) => {
      setBusy(true);
      try {
        const l = await json<DirListing>(`${base}?path=${encodeURIComponent(dir)}`);
        setListing(l);
        setPath(l.path);
        setError(null);
      } catch (e) {
        setError({ what: `Listing ${dir}`, error: asApiError(e) });
      } finally {
        setBusy(false);
      }
    },
    [base],
  );

  useEffect(() => {
    if (running) void list(listing?.path ?? '/');
    // When it starts running (or another sandbox is shown): the directory
    // shown last, else the root.
  }, [running, list]);

  const onSubmit = (e: Event) => {
    e.preventDefault();
    const dir = path.trim() || '/';
    void list(dir.startsWith('/') ? dir : `/${dir}`);
  };

  const onUpload = async () => {
    const file = upload.current?.files?.[0];
    const dir = listing?.path ?? '/';
    setNote('');
    if (!file) {
      setError({
        what: 'Upload',
        error: asApiError(new Error('Choose a file to upload first.')),
      });
      return;
    }
    if (file.size > MAX_UPLOAD) {
      setError({ what: 'Upload', error: asApiError(new Error(`${file.name} is over 64 MiB.`)) });
      return;
    }
    const target = join(dir, file.name);
    setBusy(true);
    try {
      await request(`${base}/content?path=${encodeURIComponent(target)}`, {
        method: 'PUT',
        body: file,
      });
      setError(null);
      setNote(`Uploaded ${file.name} to ${dir}.`);
      if (upload.current) upload.current.value = '';
      await list(dir);
    } catch (e) {
      setError({ what: `Uploading ${file.name}`, error: asApiError(e) });
    } finally {
      setBusy(false);
    }
  };

  const dir = listing?.path ?? '/';
  const entry = (e: DirEntry) => {
    const full = join(dir, e.name);
    const download = `${base}/content?path=${encodeURIComponent(full)}`;
    return (
      <tr key={e.name} data-file-name={e.name}>
        <th scope="row">
          {e.kind === 'dir' ? (
            <button type="button" class="linkish" onClick={() => void list(full)}>
              {e.name}/
            </button>
          ) : (
            e.name
          )}
        </th>
        <td>{e.kind}</td>
        <td class="num">{e.kind === 'file' ? bytes(e.size) : ''}</td>
        <td class="file-actions">
          {e.kind === 'file' || e.kind === 'symlink' ? (
            <a href={download} download={e.name} aria-label={`Download ${e.name}`}>
              Download
            </a>
          ) : null}
          {e.kind === 'symlink' ? (
            <button
              type="button"
              class="linkish"
              aria-label={`Open ${e.name} as a directory`}
              onClick={() => void list(full)}
            >
              Open
            </button>
          ) : null}
        </td>
      </tr>
    );
  };

  return (
    <section aria-labelledby="files-h">
      <h2 id="files-h">Files</h2>
      {!running ? <p class="note">The files browser needs a running sandbox.</p> : null}
      <form class="inline-form" onSubmit={onSubmit}>
        <label for="files-path">Path</label>
        <input
          id="files-path"
          type="text"
          value={path}
          spellcheck={false}
          autoComplete="off"
          onInput={(e) => setPath(e.currentTarget.value)}
        />
        <button type="submit" disabled={!running}>
          List
        </button>
      </form>
      <ErrorAlert error={error?.error ?? null} context={error?.what} />
      {note ? (
        <p class="ok" role="status">
          {note}
        </p>
      ) : null}
      <table id="files" class="data" aria-busy={busy ? 'true' : 'false'}>
        <caption>{listing ? `Contents of ${listing.path}` : 'No directory listed yet.'}</caption>
        <thead>
          <tr>
            <th scope="col">Name</th>
            <th scope="col">Kind</th>
            <th scope="col">Size</th>
            <th scope="col">Download</th>
          </tr>
        </thead>
        <tbody>
          {listing && listing.path !== '/' ? (
            <tr data-file-name="..">
              <th scope="row">
                <button
                  type="button"
                  class="linkish"
                  aria-label=".. (parent directory)"
                  onClick={() => void list(parent(listing.path))}
                >
                  ..
                </button>
              </th>
              <td>dir</td>
              <td />
              <td />
            </tr>
          ) : null}
          {listing?.entries.map(entry)}
        </tbody>
      </table>
      <div class="inline-form upload">
        <label for="files-upload">Upload file</label>
        <input id="files-upload" type="file" ref={upload} disabled={!running} />
        <button type="button" onClick={() => void onUpload()} disabled={!running || busy}>
          Upload
        </button>
        <span class="muted">into {dir} (at most 64 MiB)</span>
      </div>
    </section>
  );
}

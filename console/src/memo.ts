// `memo` without preact/compat (which hooks every vnode of the app): a
// component that re-renders only when a prop changed (shallow compare).

import { Component, h, type FunctionComponent } from 'preact';

export function memo<P extends object>(fn: FunctionComponent<P>): FunctionComponent<P> {
  class Memo extends Component<P> {
    override shouldComponentUpdate(next: P): boolean {
      const old = this.props as Record<string, unknown>;
      const now = next as Record<string, unknown>;
      for (const k in now) if (now[k] !== old[k]) return true;
      for (const k in old) if (!(k in now)) return true;
      return false;
    }

    override render(props: P) {
      return h(fn, props);
    }
  }
  return Memo as unknown as FunctionComponent<P>;
}

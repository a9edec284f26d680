//! The local backend over a fresh burrow home per case, in the shared
//! test environment of `burrow-test-support` (the static guest agent, the
//! busybox image, the `burrow` binary hosting the supervisor).

#![allow(dead_code)]

pub mod serve;

use std::sync::Arc;

use burrow::{Backend, LocalBackend};
use burrow_conformance::{BoxError, Store};
pub use burrow_test_support::{
    burrow_bin, busybox_rootfs, diagnostics_of, init_env, logs_of, new_home_dir, Home,
};

/// A fresh store for one case: a new burrow home (short path: unix socket
/// paths live under it); each `open` is a new `LocalBackend` on it.
pub async fn local_store() -> Result<Store, BoxError> {
    local_store_with(|b| Arc::new(b) as Arc<dyn Backend>).await
}

/// Like [`local_store`], with every `LocalBackend` opened passed through
/// `wrap` (a backend of the tests' own over the local one).
pub async fn local_store_with<W>(wrap: W) -> Result<Store, BoxError>
where
    W: Fn(LocalBackend) -> Arc<dyn Backend> + Clone + Send + Sync + 'static,
{
    init_env();
    let dir = new_home_dir()?;
    let path = dir.path().to_owned();
    let open_path = path.clone();
    let logs_path = path.clone();
    Ok(Store::new(move || {
        let (path, wrap) = (open_path.clone(), wrap.clone());
        async move { Ok(wrap(LocalBackend::open_at(path).await?)) }
    })
    .location(path.to_string_lossy())
    .diagnostics(move || logs_of(&logs_path))
    .keep(Home::new(dir)))
}

//! Fault-injection points for crash-safety tests (debug builds only).
//!
//! With `BURROW_FAULT=<point>` in the environment, a process reaching that
//! point writes its pid to `$BURROW_FAULT_MARKER` and hangs, so a test can
//! SIGKILL it at exactly that step. Release builds compile this to nothing.

/// Hangs here if `BURROW_FAULT` names this point (debug builds only).
pub fn point(name: &str) {
    #[cfg(debug_assertions)]
    {
        if std::env::var("BURROW_FAULT").is_ok_and(|v| v == name) {
            if let Some(marker) = std::env::var_os("BURROW_FAULT_MARKER") {
                let tmp = std::path::PathBuf::from(&marker).with_extension("tmp");
                let _ = std::fs::write(&tmp, std::process::id().to_string());
                let _ = std::fs::rename(&tmp, &marker);
            }
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = name;
}

/// Whether `BURROW_FAULT` names `name`, for faults that change behaviour
/// instead of hanging (debug builds only; always false in release builds).
pub fn enabled(name: &str) -> bool {
    cfg!(debug_assertions) && std::env::var("BURROW_FAULT").is_ok_and(|v| v == name)
}

/// Holds here (asynchronously) if `BURROW_FAULT` names this point, until the
/// test releases it by creating `$BURROW_FAULT_MARKER.release`; the marker
/// (holding our pid) says the window is open. For tests that must land calls
/// inside a window, then let the process go on (debug builds only).
pub async fn hold(name: &str) {
    #[cfg(debug_assertions)]
    {
        if std::env::var("BURROW_FAULT").is_ok_and(|v| v == name) {
            let Some(marker) = std::env::var_os("BURROW_FAULT_MARKER") else {
                return;
            };
            let marker = std::path::PathBuf::from(marker);
            let mut release = marker.clone().into_os_string();
            release.push(".release");
            let release = std::path::PathBuf::from(release);
            let tmp = marker.with_extension("tmp");
            let _ = std::fs::write(&tmp, std::process::id().to_string());
            let _ = std::fs::rename(&tmp, &marker);
            while !release.exists() {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = name;
}

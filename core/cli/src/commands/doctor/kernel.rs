//! How to get the vm driver's guest kernel, for `burrow doctor`: where
//! `scripts/build-kernel.sh` puts it and keeps it, the variable that points
//! at one, and the places the driver looks without that variable.

use std::path::PathBuf;

use serde::Serialize;

/// The variable that points the vm driver at a kernel.
const KERNEL_ENV: &str = "BURROW_VM_KERNEL";
/// Where the driver looks on every host (see `BURROW_VM_KERNEL` in README).
const SYSTEM_KERNEL: &str = "/usr/lib/burrow/vmlinux";

/// How to get the guest kernel (`vm_kernel` in `burrow doctor --json`).
#[derive(Debug, Serialize)]
pub(super) struct KernelHelp {
    /// The kernel the vm driver uses, if it finds one.
    pub found: Option<PathBuf>,
    /// Why none was found.
    pub error: Option<String>,
    /// The variable that points at a kernel (`BURROW_VM_KERNEL`).
    pub env: &'static str,
    /// Its value, if set.
    pub env_value: Option<PathBuf>,
    /// The script that builds the kernel, in a burrow checkout.
    pub build_script: &'static str,
    /// Where that script writes it, relative to the checkout.
    pub build_output: &'static str,
    /// Where the script also keeps every kernel it built
    /// (`<cache_dir>/<key>/vmlinux`); null when its cache is disabled.
    pub cache_dir: Option<PathBuf>,
    /// Kernels in that cache, newest first.
    pub cached: Vec<PathBuf>,
    /// Where the driver finds a kernel without the variable.
    pub install_paths: Vec<PathBuf>,
    /// What to do, in words.
    pub hint: String,
}

impl KernelHelp {
    /// Looks for the kernel as the vm driver does, and for the ones the
    /// build script left in its cache.
    pub(super) fn probe() -> KernelHelp {
        let (found, error) = match burrow::internal::driver::vm::locate_kernel() {
            Ok(p) => (Some(p), None),
            Err(e) => (None, Some(e.to_string())),
        };
        let cache_dir = script_cache_dir();
        let cached = cache_dir.as_ref().map(cached_kernels).unwrap_or_default();
        let mut install_paths = Vec::new();
        if let Some(dir) =
            burrow::internal::burrow_bin().and_then(|b| b.parent().map(PathBuf::from))
        {
            install_paths.push(dir.join("burrow-vmlinux"));
        }
        install_paths.push(PathBuf::from(SYSTEM_KERNEL));
        let hint = hint(found.is_some(), &cached, cache_dir.as_ref(), &install_paths);
        KernelHelp {
            found,
            error,
            env: KERNEL_ENV,
            env_value: std::env::var_os(KERNEL_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            build_script: "scripts/build-kernel.sh",
            build_output: "target/kernel/vmlinux",
            cache_dir,
            cached,
            install_paths,
            hint,
        }
    }
}

fn hint(
    found: bool,
    cached: &[PathBuf],
    cache_dir: Option<&PathBuf>,
    install_paths: &[PathBuf],
) -> String {
    if found {
        return "the vm driver has its guest kernel".into();
    }
    let places = install_paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(" or ");
    if let Some(newest) = cached.first() {
        return format!(
            "scripts/build-kernel.sh built one earlier: export {KERNEL_ENV}={}, or copy it to {places}",
            newest.display()
        );
    }
    let kept = cache_dir
        .map(|d| format!(", and keeps a copy in {}/<key>/vmlinux", d.display()))
        .unwrap_or_default();
    format!(
        "build it in a burrow checkout with `bash scripts/build-kernel.sh` (about 7 minutes on \
         2 cores; scripts/install-deps.sh installs what it needs); it prints the path of the \
         vmlinux (target/kernel/vmlinux{kept}); then export {KERNEL_ENV}=<that path>, or copy \
         it to {places}"
    )
}

/// The cache of `scripts/build-kernel.sh`:
/// `${BURROW_KERNEL_CACHE-${XDG_CACHE_HOME:-$HOME/.cache}/burrow/kernel}`
/// (set but empty: no cache).
fn script_cache_dir() -> Option<PathBuf> {
    if let Some(v) = std::env::var_os("BURROW_KERNEL_CACHE") {
        return (!v.is_empty()).then(|| PathBuf::from(v));
    }
    let var = |n| {
        std::env::var_os(n)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("XDG_CACHE_HOME")
        .or_else(|| var("HOME").map(|h| h.join(".cache")))
        .map(|c| c.join("burrow/kernel"))
}

/// `<dir>/<key>/vmlinux` files, newest first.
fn cached_kernels(dir: &PathBuf) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .map(|e| e.path().join("vmlinux"))
        .filter_map(|p| {
            let modified = std::fs::metadata(&p).ok()?.modified().ok()?;
            Some((modified, p))
        })
        .collect();
    found.sort_by_key(|f| std::cmp::Reverse(f.0));
    found.into_iter().map(|(_, p)| p).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_hint_prefers_a_cached_kernel_and_otherwise_says_how_to_build_one() {
        let installs = [
            PathBuf::from("/b/burrow-vmlinux"),
            PathBuf::from(SYSTEM_KERNEL),
        ];
        let cache = PathBuf::from("/c/burrow/kernel");
        let cached = [cache.join("k1/vmlinux")];
        let h = hint(false, &cached, Some(&cache), &installs);
        assert!(
            h.contains("export BURROW_VM_KERNEL=/c/burrow/kernel/k1/vmlinux"),
            "{h}"
        );
        let h = hint(false, &[], Some(&cache), &installs);
        assert!(h.contains("bash scripts/build-kernel.sh"), "{h}");
        assert!(h.contains("/c/burrow/kernel/<key>/vmlinux"), "{h}");
        assert!(
            h.contains("/b/burrow-vmlinux or /usr/lib/burrow/vmlinux"),
            "{h}"
        );
        assert_eq!(
            hint(true, &[], None, &installs),
            "the vm driver has its guest kernel"
        );
    }

    #[test]
    fn cached_kernels_are_listed_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        for (key, age) in [("old", 100), ("new", 0)] {
            let d = dir.path().join(key);
            std::fs::create_dir(&d).unwrap();
            let f = std::fs::File::create(d.join("vmlinux")).unwrap();
            let t = std::time::SystemTime::now() - std::time::Duration::from_secs(age);
            f.set_modified(t).unwrap();
        }
        std::fs::create_dir(dir.path().join("empty")).unwrap();
        let found = cached_kernels(&dir.path().to_path_buf());
        assert_eq!(
            found,
            [
                dir.path().join("new/vmlinux"),
                dir.path().join("old/vmlinux")
            ]
        );
    }
}

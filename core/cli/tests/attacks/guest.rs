//! Issue 56, item 11, the guest's lesser holes:
//!
//! - names took bidi overrides and zero-width characters (`evil\u{202E}txt`
//!   shows as another name): refused with `invalid_name`;
//! - a guest process that wrote garbage into its own agent channel (root in
//!   a container opens `/proc/1/fd/N`, the agent's pipe; root in a microVM
//!   takes the agent's port with `pidfd_getfd`) left the sandbox `running`
//!   and every later call waiting 120 s: the run now ends as `crashed` and
//!   a call is answered `invalid_state` within seconds, for garbage, for a
//!   length word whose body never comes, either way along the channel;
//! - the guest's `/proc/self/mountinfo` showed the host's paths (the burrow
//!   home in the overlay's options and the generated files' binds, where
//!   burrow is installed in the agent's): only a mounted host directory or
//!   named volume still shows its own path (the kernel prints a bind's
//!   source as a path in its filesystem, whatever path bound it);
//! - `io_uring` was allowed by the default seccomp profile: a guest
//!   program's `io_uring_setup` now fails with `EPERM`.
//!
//! The guest side is a static Go program (`GUESTX`), built once per user.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use burrow::{Backend, ErrorCode, ExitReason, ListFilter, Sandbox, Status};
use burrow_cli_testkit::{agent_bin, busybox_rootfs, is_vm, sh_ok, TestHome};

/// The guest's helper: `uring` tries `io_uring_setup` and prints `ring` or
/// `errno N`; `inject out|in HEX` writes the bytes into PID 1's (the
/// agent's) channel, `out` the end it writes frames to the host on, `in`
/// the end it reads the host's from.
const GUESTX: &str = r#"package main

import (
	"encoding/hex"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

func main() {
	switch os.Args[1] {
	case "uring":
		var params [120]byte
		fd, _, errno := syscall.Syscall(425, 8, uintptr(unsafe.Pointer(&params[0])), 0)
		if errno != 0 {
			fmt.Printf("errno %d\n", int(errno))
			return
		}
		syscall.Close(int(fd))
		fmt.Println("ring")
	case "inject":
		inject(os.Args[2], os.Args[3])
	}
}

// The agent's channel end among PID 1's descriptors: a pipe (a container's
// stdio, duplicated above 2) or a virtio port (a microVM's).
func channelFd(dir string) int {
	entries, err := os.ReadDir("/proc/1/fd")
	if err != nil {
		fmt.Fprintln(os.Stderr, "listing:", err)
		os.Exit(2)
	}
	var fds []int
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil && n >= 3 {
			fds = append(fds, n)
		}
	}
	sort.Ints(fds)
	for _, n := range fds {
		p := "/proc/1/fd/" + strconv.Itoa(n)
		link, err := os.Readlink(p)
		if err != nil {
			continue
		}
		if strings.HasPrefix(link, "/dev/vport") && dir == "out" {
			return n
		}
		if !strings.HasPrefix(link, "pipe:") {
			continue
		}
		fi, err := os.Lstat(p)
		if err != nil {
			continue
		}
		mode := fi.Mode().Perm()
		if dir == "out" && mode&0400 == 0 && mode&0200 != 0 {
			return n
		}
		if dir == "in" && mode&0400 != 0 && mode&0200 == 0 {
			return n
		}
	}
	fmt.Fprintln(os.Stderr, "no channel descriptor", dir)
	os.Exit(2)
	return -1
}

func inject(dir, bytes string) {
	data, err := hex.DecodeString(bytes)
	if err != nil {
		os.Exit(2)
	}
	n := channelFd(dir)
	fd := -1
	f, err := os.OpenFile(fmt.Sprintf("/proc/1/fd/%d", n), os.O_WRONLY, 0)
	if err == nil {
		fd = int(f.Fd())
	} else {
		pidfd, _, e1 := syscall.Syscall(434, 1, 0, 0)
		if e1 != 0 {
			fmt.Fprintln(os.Stderr, "open:", err, "pidfd_open:", e1)
			os.Exit(3)
		}
		got, _, e2 := syscall.Syscall(438, pidfd, uintptr(n), 0)
		if e2 != 0 {
			fmt.Fprintln(os.Stderr, "open:", err, "pidfd_getfd:", e2)
			os.Exit(3)
		}
		fd = int(got)
	}
	if _, err := syscall.Write(fd, data); err != nil {
		fmt.Fprintln(os.Stderr, "write:", err)
		os.Exit(4)
	}
	fmt.Println("written", n)
}
"#;

/// The helper, built once.
pub(crate) fn guestx() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| super::guest_program("guestx", GUESTX))
}

/// A running sandbox with the helper at `/root/guestx`.
async fn armed(home: &TestHome, name: &str) -> Sandbox {
    let sb = home.builder(name).create().await.unwrap();
    sb.fs()
        .write_with(
            "/root/guestx",
            &std::fs::read(guestx()).unwrap(),
            Some(0o755),
            false,
        )
        .await
        .unwrap();
    sb
}

/// Has a guest process write `bytes` into the agent's channel (`dir`: out
/// or in) a moment after this exec has been answered.
async fn scribble(sb: &Sandbox, dir: &str, bytes: &[u8]) {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    sh_ok(
        sb,
        &format!(
            "setsid sh -c 'sleep 1; /root/guestx inject {dir} {hex} >/tmp/inject.log 2>&1' \
             </dev/null >/dev/null 2>&1 &"
        ),
    )
    .await;
}

/// After the channel was scribbled on: the next call is answered within
/// `within` (never left waiting), `invalid_state` of a crashed run.
async fn answered_as_crashed(sb: &Sandbox, within: Duration) {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let asked = Instant::now();
    let answer = tokio::time::timeout(within, sb.exec(["true"]))
        .await
        .unwrap_or_else(|_| panic!("no answer within {within:?}: the call hangs"));
    let err = answer.map(|o| o.status).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidState, "{err}");
    let info = sb.info().await.unwrap();
    assert_eq!(info.status, Status::Crashed, "{info:?}");
    let reason = info.last_run.as_ref().and_then(|r| r.exit_reason);
    assert_eq!(reason, Some(ExitReason::Crashed), "{info:?}");
    // Every later call is answered at once too.
    let again = tokio::time::timeout(Duration::from_secs(5), sb.exec(["true"]))
        .await
        .expect("a second call is answered");
    assert_eq!(
        again.map(|o| o.status).unwrap_err().code(),
        ErrorCode::InvalidState
    );
    eprintln!("answered {:?} after the call", asked.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_with_invisible_or_reordering_characters_are_refused() {
    let home = TestHome::new().await;
    let image = busybox_rootfs().to_string_lossy().into_owned();
    for c in [
        '\u{202E}',
        '\u{202A}',
        '\u{2066}',
        '\u{2069}',
        '\u{200B}',
        '\u{200D}',
        '\u{200F}',
        '\u{FEFF}',
        '\u{2060}',
        '\u{2064}',
        '\u{061C}',
        '\u{180E}',
        '\u{00AD}',
        '\u{E0041}',
    ] {
        let name = format!("evil{c}txt.exe");
        let err = home.builder(&name).define().await.map(|_| ()).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidName, "{c:?}");
        let scoped = format!("team/evil{c}");
        let err = home
            .builder(&scoped)
            .define()
            .await
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidName, "{c:?}");
        let out = home
            .cli()
            .args(["--json", "create", "--name", &name, &image])
            .output()
            .unwrap();
        assert!(!out.status.success(), "create {c:?} succeeded");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
        });
        assert_eq!(v["error"]["code"], "invalid_name", "{c:?}");
    }
    let all = home.backend.list(&ListFilter::default()).await.unwrap();
    assert!(all.is_empty(), "{all:?}");
    // Names in any script stay accepted.
    home.builder("データ-файл").define().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_agent_channel_crashes_the_run_at_once() {
    let home = TestHome::new().await;
    let sb = armed(&home, "scribbler").await;
    scribble(&sb, "out", b"this is not a frame of the protocol\n").await;
    answered_as_crashed(&sb, Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_left_half_way_crashes_the_run() {
    let home = TestHome::new().await;
    let sb = armed(&home, "half-frame").await;
    // A length word that promises 4 MiB - 1 bytes, and nothing after it:
    // the host would read the agent's next frames as its body.
    scribble(&sb, "out", &[0, 0x3f, 0xff, 0xff]).await;
    answered_as_crashed(&sb, Duration::from_secs(30)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_left_half_way_into_the_agent_crashes_the_run() {
    if is_vm() {
        // A microVM's port carries the guest's writes to the host only.
        return;
    }
    let home = TestHome::new().await;
    let sb = armed(&home, "half-input").await;
    // The agent would read the host's next frames as this one's body.
    scribble(&sb, "in", &[0, 0x3f, 0xff, 0xff]).await;
    answered_as_crashed(&sb, Duration::from_secs(30)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn io_uring_is_refused_in_the_guest() {
    if is_vm() {
        // A microVM's own kernel is its boundary: no filter there.
        return;
    }
    let home = TestHome::new().await;
    let sb = armed(&home, "uring").await;
    let out = sh_ok(&sb, "/root/guestx uring").await;
    assert_eq!(out.trim(), format!("errno {}", libc::EPERM), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guest_mount_table_shows_no_host_path() {
    let home = TestHome::new().await;
    let shared = tempfile::tempdir().unwrap();
    let sb = home
        .builder("mounts")
        .volume("vol", "/vol")
        .mount(shared.path(), "/data", true)
        .create()
        .await
        .unwrap();
    let table = sh_ok(&sb, "cat /proc/self/mountinfo").await;
    let home_path = home.path().to_string_lossy().into_owned();
    let agent_dir = agent_bin().parent().unwrap().to_string_lossy().into_owned();
    let mut checked = 0;
    let mut agent_seen = false;
    for line in table.lines() {
        // Fields: id, parent, dev, root, mount point, ...
        let fields: Vec<&str> = line.split(' ').collect();
        let (root, point) = (fields[3], fields[4]);
        if point == "/vol" || point == "/data" {
            // What the tenant mounted shows its own path.
            continue;
        }
        checked += 1;
        for leak in [home_path.as_str(), agent_dir.as_str(), "sandboxes/"] {
            assert!(!line.contains(leak), "{leak:?} shows in: {line}");
        }
        if point == "/.burrow/agent" {
            // burrow's own link to the agent, in its mount directory
            // (`/run/burrow` as root; rootless, the user's runtime
            // directory, `/tmp/burrow-<uid>` without XDG_RUNTIME_DIR).
            agent_seen = true;
            let (dir, file) = root.rsplit_once('/').unwrap();
            assert!(file.starts_with("agent-"), "{line}");
            let fixed = |c: &str| {
                ["", "run", "burrow", "mounts", "tmp", "user"].contains(&c)
                    || c.bytes().all(|b| b.is_ascii_digit())
                    || c.strip_prefix("burrow-")
                        .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            };
            assert!(dir.split('/').all(fixed), "{line}");
            continue;
        }
        assert!(!line.contains("/tmp/"), "a temporary path shows in: {line}");
    }
    assert!(checked > 3 && (agent_seen || is_vm()), "{table}");
}

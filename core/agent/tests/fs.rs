#![allow(clippy::unwrap_used)]
//! File requests: read/write, metadata, directory operations, tar copy.

mod common;

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use burrow_protocol::{FileKind, GuestErrorCode, HostMsg, Request, Response, MAX_CHUNK};
use common::Agent;

fn s(p: &Path) -> String {
    p.to_str().expect("utf-8 path").to_string()
}

fn write_file(agent: &mut Agent, path: &Path, content: &[u8], mode: Option<u32>) -> Response {
    let id = agent.request(Request::WriteFile {
        path: s(path),
        mode,
        append: false,
    });
    for chunk in content.chunks(MAX_CHUNK) {
        agent.data(id, chunk);
    }
    agent.eof(id);
    agent.collect(id).result.expect("write_file")
}

#[test]
fn write_and_read_a_large_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.bin");
    let content: Vec<u8> = (0..1024 * 1024 + 123).map(|i| (i % 253) as u8).collect();
    let mut agent = Agent::start();
    assert_eq!(
        write_file(&mut agent, &path, &content, None),
        Response::Done
    );
    assert!(std::fs::read(&path).expect("read back") == content);
    let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
    assert_eq!(mode & 0o7777, 0o644);

    let out = agent.call(Request::ReadFile { path: s(&path) });
    assert_eq!(out.result, Ok(Response::Done));
    assert_eq!(out.stdout.len(), content.len());
    assert!(out.stdout == content);
}

#[test]
fn write_file_mode_append_and_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("script.sh");
    let mut agent = Agent::start();
    write_file(&mut agent, &path, b"one\n", Some(0o750));
    let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
    assert_eq!(mode & 0o7777, 0o750);

    let id = agent.request(Request::WriteFile {
        path: s(&path),
        mode: None,
        append: true,
    });
    agent.data(id, b"two\n");
    agent.eof(id);
    assert_eq!(agent.collect(id).result, Ok(Response::Done));
    assert_eq!(std::fs::read_to_string(&path).expect("read"), "one\ntwo\n");

    // Missing parent: answered right away, the data that follows is ignored.
    let id = agent.request(Request::WriteFile {
        path: s(&dir.path().join("missing/file")),
        mode: None,
        append: false,
    });
    agent.data(id, b"lost");
    agent.eof(id);
    assert_eq!(agent.collect(id).error().code, GuestErrorCode::NotFound);

    let out = agent.call(Request::WriteFile {
        path: "relative/file".into(),
        mode: None,
        append: false,
    });
    assert_eq!(out.error().code, GuestErrorCode::InvalidArgument);

    let out = agent.call(Request::ReadFile {
        path: s(&dir.path().join("nope")),
    });
    assert_eq!(out.error().code, GuestErrorCode::NotFound);
    let out = agent.call(Request::ReadFile {
        path: s(dir.path()),
    });
    assert_eq!(out.error().code, GuestErrorCode::IsADirectory);
    assert_eq!(agent.call(Request::Ping).result, Ok(Response::Pong));
}

#[test]
fn directory_operations() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let mut agent = Agent::start();

    let nested = root.join("a/b/c");
    let out = agent.call(Request::Mkdir {
        path: s(&nested),
        parents: false,
    });
    assert_eq!(out.error().code, GuestErrorCode::NotFound);
    for _ in 0..2 {
        let out = agent.call(Request::Mkdir {
            path: s(&nested),
            parents: true,
        });
        assert_eq!(out.result, Ok(Response::Done));
    }
    let out = agent.call(Request::Mkdir {
        path: s(&nested),
        parents: false,
    });
    assert_eq!(out.error().code, GuestErrorCode::AlreadyExists);

    std::fs::write(root.join("zeta.txt"), b"12345").expect("write");
    std::os::unix::fs::symlink("zeta.txt", root.join("link")).expect("symlink");

    match agent.call(Request::ListDir { path: s(root) }).result {
        Ok(Response::Entries { entries }) => {
            let names: Vec<_> = entries.iter().map(|e| e.name.as_str()).collect();
            assert_eq!(names, ["a", "link", "zeta.txt"]);
            assert_eq!(entries[0].kind, FileKind::Dir);
            assert_eq!(entries[1].kind, FileKind::Symlink);
            assert_eq!(entries[2].kind, FileKind::File);
            assert_eq!(entries[2].size, 5);
        }
        other => panic!("unexpected {other:?}"),
    }

    for (name, kind, size, target) in [
        ("link", FileKind::Symlink, 8, Some("zeta.txt")),
        ("zeta.txt", FileKind::File, 5, None),
    ] {
        match agent
            .call(Request::Stat {
                path: s(&root.join(name)),
            })
            .result
        {
            Ok(Response::Stat { stat }) => {
                assert_eq!(stat.kind, kind);
                assert_eq!(stat.size, size);
                assert_eq!(stat.link_target.as_deref(), target);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let out = agent.call(Request::Stat {
        path: s(&root.join("missing")),
    });
    assert_eq!(out.error().code, GuestErrorCode::NotFound);

    let exists =
        |agent: &mut Agent, p: &Path| match agent.call(Request::Exists { path: s(p) }).result {
            Ok(Response::Exists { exists }) => exists,
            other => panic!("unexpected {other:?}"),
        };
    assert!(exists(&mut agent, &root.join("zeta.txt")));
    assert!(!exists(&mut agent, &root.join("missing")));
    assert!(!exists(&mut agent, &root.join("zeta.txt/below")));

    let out = agent.call(Request::Rename {
        from: s(&root.join("zeta.txt")),
        to: s(&root.join("a/moved.txt")),
    });
    assert_eq!(out.result, Ok(Response::Done));
    assert!(root.join("a/moved.txt").exists());
    assert!(!root.join("zeta.txt").exists());

    let out = agent.call(Request::Remove {
        path: s(&root.join("a")),
        recursive: false,
    });
    assert_eq!(out.error().code, GuestErrorCode::NotEmpty);
    let out = agent.call(Request::Remove {
        path: s(&root.join("link")),
        recursive: false,
    });
    assert_eq!(out.result, Ok(Response::Done));
    let out = agent.call(Request::Remove {
        path: s(&root.join("a")),
        recursive: true,
    });
    assert_eq!(out.result, Ok(Response::Done));
    assert!(!root.join("a").exists());
    let out = agent.call(Request::Remove {
        path: "/".into(),
        recursive: true,
    });
    assert_eq!(out.error().code, GuestErrorCode::InvalidArgument);

    for req in [
        Request::ListDir { path: "tmp".into() },
        Request::Stat { path: "".into() },
        Request::Exists { path: "x".into() },
        Request::Rename {
            from: "/tmp/x".into(),
            to: "y".into(),
        },
    ] {
        assert_eq!(
            agent.call(req).error().code,
            GuestErrorCode::InvalidArgument
        );
    }
    assert_eq!(agent.call(Request::Sync).result, Ok(Response::Done));
}

/// Sends a tar archive as the input of a CopyIn request.
fn copy_in(agent: &mut Agent, dest: &Path, archive: &[u8]) -> Result<Response, GuestErrorCode> {
    let id = agent.request(Request::CopyIn { path: s(dest) });
    for chunk in archive.chunks(1000) {
        agent.data(id, chunk);
    }
    agent.eof(id);
    agent.collect(id).result.map_err(|e| e.code)
}

#[test]
fn copy_in_and_out_round_trip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src/tree");
    std::fs::create_dir_all(src.join("sub/deeper")).expect("mkdir");
    std::fs::write(src.join("a.txt"), b"alpha").expect("write");
    std::fs::write(src.join("sub/b.txt"), vec![b'b'; 200_000]).expect("write");
    std::fs::write(src.join("sub/deeper/run.sh"), b"#!/bin/sh\n").expect("write");
    std::fs::set_permissions(
        src.join("sub/deeper/run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("chmod");
    std::os::unix::fs::symlink("a.txt", src.join("link")).expect("symlink");

    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    builder.append_dir_all("tree", &src).expect("archive");
    let archive = builder.into_inner().expect("archive");

    let mut agent = Agent::start();
    let dest = dir.path().join("dest/new");
    assert_eq!(copy_in(&mut agent, &dest, &archive), Ok(Response::Done));
    let got = dest.join("tree");
    assert_eq!(std::fs::read(got.join("a.txt")).expect("a"), b"alpha");
    assert_eq!(
        std::fs::read(got.join("sub/b.txt")).expect("b").len(),
        200_000
    );
    let mode = std::fs::metadata(got.join("sub/deeper/run.sh"))
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    assert_eq!(
        std::fs::read_link(got.join("link")).expect("link"),
        Path::new("a.txt")
    );

    let out = agent.call(Request::CopyOut { path: s(&got) });
    assert_eq!(out.result, Ok(Response::Done));
    let mut ar = tar::Archive::new(out.stdout.as_slice());
    let mut seen = Vec::new();
    for entry in ar.entries().expect("entries") {
        let mut entry = entry.expect("entry");
        let path = entry.path().expect("path").to_string_lossy().into_owned();
        let path = path.trim_end_matches('/').to_string();
        if path == "tree/a.txt" {
            let mut text = String::new();
            entry.read_to_string(&mut text).expect("read");
            assert_eq!(text, "alpha");
        }
        if path == "tree/link" {
            assert_eq!(entry.header().entry_type(), tar::EntryType::Symlink);
        }
        seen.push(path);
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            "tree",
            "tree/a.txt",
            "tree/link",
            "tree/sub",
            "tree/sub/b.txt",
            "tree/sub/deeper",
            "tree/sub/deeper/run.sh"
        ]
    );

    // A single file comes out as one entry named after it.
    let out = agent.call(Request::CopyOut {
        path: s(&got.join("a.txt")),
    });
    let mut ar = tar::Archive::new(out.stdout.as_slice());
    let names: Vec<String> = ar
        .entries()
        .expect("entries")
        .map(|e| {
            e.expect("entry")
                .path()
                .expect("path")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(names, ["a.txt"]);

    let out = agent.call(Request::CopyOut {
        path: s(&dir.path().join("missing")),
    });
    assert_eq!(out.error().code, GuestErrorCode::NotFound);
}

/// One raw tar entry: name, type, link name, content.
type RawEntry<'a> = (&'a [u8], tar::EntryType, &'a [u8], &'a [u8]);

/// A tar archive of raw entries, bypassing the tar crate's own refusal to
/// write `..` or absolute names.
fn raw_tar(entries: &[RawEntry<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, kind, link, content) in entries {
        let mut header = tar::Header::new_old();
        {
            let raw = header.as_old_mut();
            raw.name[..name.len()].copy_from_slice(name);
            raw.linkname[..link.len()].copy_from_slice(link);
        }
        header.set_entry_type(*kind);
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(content);
        let pad = (512 - content.len() % 512) % 512;
        out.extend_from_slice(&vec![0u8; pad]);
    }
    out.extend_from_slice(&[0u8; 1024]);
    out
}

#[test]
fn copy_in_refuses_escapes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dest = dir.path().join("dest");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let mut agent = Agent::start();
    let file = tar::EntryType::Regular;

    let archive = raw_tar(&[(b"../escape", file, b"", b"pwned")]);
    assert_eq!(
        copy_in(&mut agent, &dest, &archive),
        Err(GuestErrorCode::InvalidArgument)
    );
    assert!(!dir.path().join("escape").exists());

    let abs = format!("{}/abs", outside.display());
    let archive = raw_tar(&[(abs.as_bytes(), file, b"", b"pwned")]);
    assert_eq!(
        copy_in(&mut agent, &dest, &archive),
        Err(GuestErrorCode::InvalidArgument)
    );

    // A symlink to outside, then a file written through it.
    let archive = raw_tar(&[
        (
            b"evil",
            tar::EntryType::Symlink,
            outside.to_str().expect("utf-8").as_bytes(),
            b"",
        ),
        (b"evil/pwned", file, b"", b"pwned"),
    ]);
    assert_eq!(
        copy_in(&mut agent, &dest, &archive),
        Err(GuestErrorCode::InvalidArgument)
    );

    // A hard link to a file outside.
    let target = format!("{}/target", outside.display());
    std::fs::write(&target, b"secret").expect("write");
    let archive = raw_tar(&[(b"hard", tar::EntryType::Link, target.as_bytes(), b"")]);
    assert_eq!(
        copy_in(&mut agent, &dest, &archive),
        Err(GuestErrorCode::InvalidArgument)
    );

    assert_eq!(
        std::fs::read_dir(&outside).expect("outside").count(),
        1,
        "only the test's own file is outside"
    );
    // The agent still works, and the id's leftover data is ignored.
    assert_eq!(agent.call(Request::Ping).result, Ok(Response::Pong));
    agent.send(&HostMsg::Eof { id: 1 });
    assert_eq!(agent.call(Request::Ping).result, Ok(Response::Pong));
}

/// Typed round trip of a `Stat` response.
#[test]
fn stat_response_decodes() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("f"), b"abc").expect("write");
    let mut agent = Agent::start();
    match agent
        .call(Request::Stat {
            path: s(&dir.path().join("f")),
        })
        .result
    {
        Ok(Response::Stat { stat: st }) => {
            assert_eq!(st.kind, FileKind::File);
            assert_eq!(st.size, 3);
            assert!(st.mtime > 0);
        }
        other => panic!("unexpected {other:?}"),
    }
}

//! The default seccomp profile compiled to a classic BPF program, here, for
//! the native x86-64 ABI.
//!
//! The runtime installs the filter before the first instruction of the
//! sandbox's first process (see `seccomp`): crun from this program, given
//! as the `run.oci.seccomp_bpf_data` annotation (no libseccomp build at
//! start); runc and runsc from the profile's JSON. The agent installs the
//! same program again as its first step (`--seccomp`, a second layer that
//! holds should a runtime skip its profile); every process of the sandbox
//! descends from it and inherits both. The program is built in
//! microseconds. The decisions are the profile's (see `seccomp`), and the
//! unit tests run the program in an interpreter against every syscall of
//! the table:
//!
//! - another architecture (the i386 `int 0x80` ABI) or an x32 syscall
//!   number: the process is killed (`SIGSYS`), as libseccomp's default for a
//!   foreign architecture;
//! - a number past the newest syscall in the table: `ENOSYS`, so that libc
//!   falls back from syscalls newer than the profile (runc does the same);
//! - a syscall the sandbox's configuration adds (`seccomp_allow`): allowed;
//! - an allowed syscall: allowed, after its argument checks (`clone` without
//!   namespace flags, the `personality` values Docker allows, `socket` of any
//!   family but `AF_VSOCK`);
//! - `clone3`: `ENOSYS` (libc falls back to `clone`, whose flags are seen);
//! - anything else: `EPERM`.

use super::seccomp::{AF_VSOCK, ALLOWED, CLONE_NAMESPACE_FLAGS, PERSONALITIES};
use super::syscalls_x86_64::SYSCALLS;

/// `AUDIT_ARCH_X86_64`.
const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
/// Syscall numbers of the x32 ABI carry this bit.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_ALLOW: u32 = 0x7fff_0000;

// Classic BPF opcodes (linux/filter.h).
const LD_W_ABS: u16 = 0x20;
const JMP_JA: u16 = 0x05;
const JMP_JEQ_K: u16 = 0x15;
const JMP_JGT_K: u16 = 0x25;
const JMP_JGE_K: u16 = 0x35;
const ALU_AND_K: u16 = 0x54;
const RET_K: u16 = 0x06;

/// Offsets into `struct seccomp_data`.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const fn off_arg_lo(i: u32) -> u32 {
    16 + 8 * i
}
const fn off_arg_hi(i: u32) -> u32 {
    20 + 8 * i
}

/// One `struct sock_filter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Insn {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

const fn stmt(code: u16, k: u32) -> Insn {
    Insn {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}
const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn { code, jt, jf, k }
}
const fn ret(k: u32) -> Insn {
    stmt(RET_K, k)
}
const fn errno(e: i32) -> u32 {
    RET_ERRNO | (e as u32 & 0xffff)
}

/// What one syscall's block does; every block ends in a `ret`. Only
/// called with the names of [`rules`], which are all allowed in some way.
fn block(name: &str, extra: &[String]) -> Vec<Insn> {
    let deny = ret(errno(libc::EPERM));
    let allow = ret(RET_ALLOW);
    if extra.iter().any(|e| e == name) {
        return vec![allow];
    }
    match name {
        // (arg0 & namespace flags) == 0; the mask has no high bits.
        "clone" => vec![
            stmt(LD_W_ABS, off_arg_lo(0)),
            stmt(ALU_AND_K, CLONE_NAMESPACE_FLAGS as u32),
            jump(JMP_JEQ_K, 0, 0, 1),
            allow,
            deny,
        ],
        "clone3" => vec![ret(errno(libc::ENOSYS))],
        // arg0 is one of the allowed values (all below 2^32).
        "personality" => {
            let n = PERSONALITIES.len();
            let mut b = vec![
                stmt(LD_W_ABS, off_arg_hi(0)),
                // High word not zero: skip the value checks, to the denial.
                jump(JMP_JEQ_K, 0, 0, (n + 1) as u8),
                stmt(LD_W_ABS, off_arg_lo(0)),
            ];
            for (i, p) in PERSONALITIES.iter().enumerate() {
                // Match: jump to the allow after the remaining checks.
                b.push(jump(JMP_JEQ_K, *p as u32, (n - i) as u8, 0));
            }
            // No value matched: skip the allow.
            b.push(jump(JMP_JA, 1, 0, 0));
            b.push(allow);
            b.push(deny);
            b
        }
        // arg0 != AF_VSOCK (as a 64-bit value).
        "socket" => vec![
            stmt(LD_W_ABS, off_arg_hi(0)),
            jump(JMP_JEQ_K, 0, 0, 2),
            stmt(LD_W_ABS, off_arg_lo(0)),
            jump(JMP_JEQ_K, AF_VSOCK as u32, 1, 0),
            allow,
            deny,
        ],
        _ => vec![allow],
    }
}

/// The syscalls with a block, by number: the profile's and `extra`. Names
/// the x86-64 table lacks (those of other ABIs, like `chown32`) have none.
/// Built once per start, on its critical path: one pass over the table, no
/// name searches.
fn rules(extra: &[String]) -> Vec<(u32, Vec<Insn>)> {
    let mut names: std::collections::HashSet<&str> = ALLOWED.iter().copied().collect();
    names.extend(["clone", "clone3", "personality", "socket"]);
    names.extend(extra.iter().map(String::as_str));
    let mut rules: Vec<(u32, Vec<Insn>)> = SYSCALLS
        .iter()
        .filter(|(n, _)| names.contains(n))
        .map(|(n, nr)| (*nr, block(n, extra)))
        .collect();
    rules.sort_by_key(|(nr, _)| *nr);
    rules.dedup_by_key(|(nr, _)| *nr);
    rules
}

/// A decision tree over sorted `rules` (the syscall number is loaded):
/// small groups are a chain of `jeq`; larger ones split on the middle
/// number with a `jgt` and a long jump to the upper half.
fn tree(rules: &[(u32, Vec<Insn>)], out: &mut Vec<Insn>) {
    const CHAIN: usize = 8;
    if rules.len() <= CHAIN {
        for (nr, body) in rules {
            // Not this one: skip its block.
            out.push(jump(JMP_JEQ_K, *nr, 0, body.len() as u8));
            out.extend_from_slice(body);
        }
        out.push(ret(errno(libc::EPERM)));
        return;
    }
    let mid = rules.len() / 2;
    let pivot = rules[mid - 1].0;
    // nr > pivot: to the upper half (the `ja` below); else fall through
    // past it into the lower half.
    out.push(jump(JMP_JGT_K, pivot, 0, 1));
    let ja = out.len();
    out.push(stmt(JMP_JA, 0));
    tree(&rules[..mid], out);
    out[ja].k = (out.len() - ja - 1) as u32;
    tree(&rules[mid..], out);
}

/// The whole program, with the syscalls `extra` names allowed too.
pub(super) fn program(extra: &[String]) -> Vec<Insn> {
    let newest = SYSCALLS.iter().map(|(_, nr)| *nr).max().unwrap_or(0);
    let mut p = vec![
        stmt(LD_W_ABS, OFF_ARCH),
        jump(JMP_JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        ret(RET_KILL_PROCESS),
        stmt(LD_W_ABS, OFF_NR),
        jump(JMP_JGE_K, X32_SYSCALL_BIT, 0, 1),
        ret(RET_KILL_PROCESS),
        jump(JMP_JGT_K, newest, 0, 1),
        ret(errno(libc::ENOSYS)),
    ];
    tree(&rules(extra), &mut p);
    p
}

/// The program as the kernel reads it: the raw `struct sock_filter`
/// array (little endian, 8 bytes an instruction).
pub(super) fn raw(program: &[Insn]) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for i in program {
        out.extend_from_slice(&i.code.to_le_bytes());
        out.push(i.jt);
        out.push(i.jf);
        out.extend_from_slice(&i.k.to_le_bytes());
    }
    out
}

/// The program as the agent's `--seccomp` argument: hex of [`raw`].
pub(super) fn agent_argument(program: &[Insn]) -> String {
    hex::encode(raw(program))
}

/// As crun's `run.oci.seccomp_bpf_data` annotation wants it: base64 of
/// [`raw`].
pub(super) fn annotation(program: &[Insn]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(raw(program))
}

/// Whether the x86-64 table knows `name` (a syscall a sandbox's
/// configuration may add to its filter).
pub(super) fn known(name: &str) -> bool {
    SYSCALLS.iter().any(|(n, _)| *n == name)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The x86-64 number of `name`, if the table has it.
    fn number(name: &str) -> Option<u32> {
        SYSCALLS.iter().find(|(n, _)| *n == name).map(|(_, nr)| *nr)
    }

    /// `struct seccomp_data` as the interpreter sees it.
    fn data(arch: u32, nr: u32, arg0: u64) -> [u8; 64] {
        let mut d = [0u8; 64];
        d[0..4].copy_from_slice(&nr.to_le_bytes());
        d[4..8].copy_from_slice(&arch.to_le_bytes());
        d[16..24].copy_from_slice(&arg0.to_le_bytes());
        d
    }

    /// A classic BPF interpreter for the opcodes the program uses.
    fn run(p: &[Insn], d: &[u8; 64]) -> u32 {
        let (mut pc, mut a) = (0usize, 0u32);
        loop {
            let i = p[pc];
            pc += 1;
            match i.code {
                LD_W_ABS => {
                    let o = i.k as usize;
                    a = u32::from_le_bytes(d[o..o + 4].try_into().unwrap());
                }
                ALU_AND_K => a &= i.k,
                JMP_JA => pc += i.k as usize,
                JMP_JEQ_K | JMP_JGT_K | JMP_JGE_K => {
                    let hit = match i.code {
                        JMP_JEQ_K => a == i.k,
                        JMP_JGT_K => a > i.k,
                        _ => a >= i.k,
                    };
                    pc += if hit { i.jt } else { i.jf } as usize;
                }
                RET_K => return i.k,
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
    }

    fn decide(name: &str, arg0: u64) -> u32 {
        run(
            &program(&[]),
            &data(AUDIT_ARCH_X86_64, number(name).unwrap(), arg0),
        )
    }

    #[test]
    fn every_syscall_gets_the_profiles_decision() {
        let p = program(&[]);
        assert!(p.len() < 4096, "within the kernel's limit: {}", p.len());
        for (name, nr) in SYSCALLS {
            let got = run(&p, &data(AUDIT_ARCH_X86_64, *nr, 0));
            let want = match *name {
                "clone3" => errno(libc::ENOSYS),
                // arg0 = 0 passes every argument check.
                "clone" | "personality" | "socket" => RET_ALLOW,
                n if ALLOWED.contains(&n) => RET_ALLOW,
                _ => errno(libc::EPERM),
            };
            assert_eq!(got, want, "{name} ({nr})");
        }
    }

    #[test]
    fn argument_checks_foreign_abis_and_unknown_numbers() {
        let eperm = errno(libc::EPERM);
        assert_eq!(decide("clone", libc::SIGCHLD as u64), RET_ALLOW);
        assert_eq!(decide("clone", libc::CLONE_NEWUSER as u64), eperm);
        assert_eq!(decide("clone", libc::CLONE_NEWNS as u64 | 0x11), eperm);
        for p in PERSONALITIES {
            assert_eq!(decide("personality", *p), RET_ALLOW, "{p:#x}");
        }
        assert_eq!(decide("personality", 0x0040000), eperm);
        assert_eq!(decide("personality", 1 << 32), eperm);
        assert_eq!(decide("socket", libc::AF_INET as u64), RET_ALLOW);
        assert_eq!(decide("socket", AF_VSOCK), eperm);
        assert_eq!(decide("socket", AF_VSOCK | 1 << 32), RET_ALLOW);
        assert_eq!(decide("mount", 0), eperm);
        assert_eq!(decide("unshare", 0), eperm);
        // io_uring is out of the profile: its rings bypass the filter.
        for ring in ["io_uring_setup", "io_uring_enter", "io_uring_register"] {
            assert_eq!(decide(ring, 0), eperm, "{ring}");
        }
        let p = program(&[]);
        assert_eq!(
            run(&p, &data(AUDIT_ARCH_X86_64, 1000, 0)),
            errno(libc::ENOSYS)
        );
        assert_eq!(
            run(&p, &data(AUDIT_ARCH_X86_64, X32_SYSCALL_BIT | 39, 0)),
            RET_KILL_PROCESS
        );
        // AUDIT_ARCH_I386: the int 0x80 ABI.
        assert_eq!(run(&p, &data(0x4000_0003, 20, 0)), RET_KILL_PROCESS);
    }

    #[test]
    fn the_table_agrees_with_libc() {
        for (name, nr) in [
            ("read", libc::SYS_read),
            ("clone", libc::SYS_clone),
            ("clone3", libc::SYS_clone3),
            ("personality", libc::SYS_personality),
            ("socket", libc::SYS_socket),
            ("openat2", libc::SYS_openat2),
            ("faccessat2", libc::SYS_faccessat2),
        ] {
            assert_eq!(number(name), Some(nr as u32), "{name}");
        }
    }

    #[test]
    fn the_argument_and_the_annotation_carry_the_program() {
        use base64::Engine as _;
        let p = program(&[]);
        let arg = agent_argument(&p);
        assert_eq!(arg.len(), p.len() * 16);
        assert_eq!(hex::decode(&arg).unwrap(), raw(&p));
        let data = base64::engine::general_purpose::STANDARD
            .decode(annotation(&p))
            .unwrap();
        assert_eq!(data, raw(&p));
        // The first instruction: load the architecture.
        assert_eq!(&data[..8], &[0x20, 0, 0, 0, 4, 0, 0, 0]);
    }

    /// A sandbox's additions are allowed outright, conditions and all;
    /// nothing else moves.
    #[test]
    fn added_syscalls_are_allowed_and_nothing_else() {
        let extra = vec!["io_uring_setup".to_owned(), "clone".to_owned()];
        let p = program(&extra);
        let at =
            |name: &str, arg0: u64| run(&p, &data(AUDIT_ARCH_X86_64, number(name).unwrap(), arg0));
        assert_eq!(at("io_uring_setup", 0), RET_ALLOW);
        assert_eq!(at("clone", libc::CLONE_NEWUSER as u64), RET_ALLOW);
        assert_eq!(at("io_uring_enter", 0), errno(libc::EPERM));
        assert_eq!(at("mount", 0), errno(libc::EPERM));
        assert_eq!(at("socket", AF_VSOCK), errno(libc::EPERM));
        assert!(known("io_uring_setup") && !known("chown32") && !known("nope"));
    }
}

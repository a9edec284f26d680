//! Tiny static programs that make one syscall, for checking a sandbox's
//! seccomp filter from the inside (also used by the container driver's
//! tests in `core/burrow/tests`).

#![allow(dead_code)]

/// A static x86-64 program (no libc) that makes one syscall and exits 0 if
/// the result is `want` (`None`: any non-negative result), else 1. With
/// `i386`, the call goes through the 32-bit `int 0x80` ABI instead.
pub fn syscall_probe(
    dir: &std::path::Path,
    name: &str,
    nr: i64,
    args: [i64; 3],
    want: Option<i64>,
    i386: bool,
) -> Vec<u8> {
    let src = dir.join(format!("{name}.c"));
    let call = if i386 {
        "__asm__ volatile(\"int $0x80\" : \"=a\"(r) : \"a\"(NR), \"b\"(A0), \"c\"(A1), \"d\"(A2) : \"memory\");"
    } else {
        "register long r10 __asm__(\"r10\") = 0;\n\
         __asm__ volatile(\"syscall\" : \"=a\"(r) : \"a\"(NR), \"D\"(A0), \"S\"(A1), \"d\"(A2), \"r\"(r10) : \"rcx\", \"r11\", \"memory\");"
    };
    let check = match want {
        Some(w) => format!("r == {w}L"),
        None => "r >= 0".into(),
    };
    std::fs::write(
        &src,
        format!(
            "#define NR {nr}L\n#define A0 {}L\n#define A1 {}L\n#define A2 {}L\n\
             void _start(void) {{\n long r;\n {call}\n long code = ({check}) ? 0 : 1;\n\
             __asm__ volatile(\"syscall\" :: \"a\"(60L), \"D\"(code));\n for (;;) {{}}\n}}\n",
            args[0], args[1], args[2]
        ),
    )
    .unwrap();
    let bin = dir.join(name);
    let out = std::process::Command::new("gcc")
        .args(["-nostdlib", "-static", "-O1", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .expect("gcc (installed by scripts/install-deps.sh)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(bin).unwrap()
}

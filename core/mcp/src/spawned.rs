//! The processes `spawn` started, and their output not read yet.

use std::sync::Arc;

/// Output kept per spawned process between two reads (older bytes are
/// dropped and counted).
pub const MAX_SPAWN_BUFFER: usize = 1024 * 1024;

/// A spawned process's output not read yet, and its end.
#[derive(Debug, Default)]
pub(crate) struct Spawned {
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
    pub(crate) dropped: usize,
    pub(crate) exit: Option<(Option<i32>, Option<i32>)>,
    pub(crate) error: Option<String>,
}

impl Spawned {
    pub(crate) fn keep(buf: &mut Vec<u8>, dropped: &mut usize, data: &[u8]) {
        buf.extend_from_slice(data);
        if buf.len() > MAX_SPAWN_BUFFER {
            let over = buf.len() - MAX_SPAWN_BUFFER;
            buf.drain(..over);
            *dropped += over;
        }
    }
}

pub(crate) type Processes = Arc<std::sync::Mutex<std::collections::HashMap<u64, Spawned>>>;

//! `burrow-conformance-caller --home DIR` or `--url URL`: one caller of a
//! conformance race in processes, on the local backend of the burrow home
//! `DIR`, or on the remote backend of the `burrow serve` at `URL` (its API
//! token in `$BURROW_TOKEN`). The program the conformance tests of this
//! crate spawn for each caller; see `burrow_conformance::caller`.

use std::process::ExitCode;
use std::sync::Arc;

use burrow::Backend;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag, home] if flag == "--home" => {
            let home = home.clone();
            burrow_conformance::caller::main(move || async move {
                Ok(Arc::new(burrow::LocalBackend::open_at(home).await?) as Arc<dyn Backend>)
            })
        }
        [flag, url] if flag == "--url" => {
            let url = url.clone();
            let token = std::env::var("BURROW_TOKEN").ok().filter(|t| !t.is_empty());
            burrow_conformance::caller::main(move || async move {
                Ok(Arc::new(burrow::RemoteBackend::connect(&url, token)?) as Arc<dyn Backend>)
            })
        }
        _ => {
            eprintln!(
                "usage: burrow-conformance-caller --home DIR | --url URL (started by the conformance kit)"
            );
            ExitCode::from(2)
        }
    }
}

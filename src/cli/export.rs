//! `retrylab export --policy NAME|JSON --library LIB`: prints the policy as the library's
//! program on stdout, and what the library cannot express on stderr (or everything as JSON).

use crate::config::ExportArgs;
use crate::export::{Library, export, read_policy, with_retry_after_mode};

/// Runs the command; its exit status: 0, or 2 for bad usage (an unknown policy or library),
/// said in one line.
pub fn run(args: &ExportArgs) -> i32 {
    let read = read_policy(&args.policy)
        .and_then(|policy| with_retry_after_mode(policy, args.retry_after_mode.as_deref()))
        .and_then(|policy| Ok((policy, Library::parse(&args.library)?)));
    let (policy, library) = match read {
        Ok(read) => read,
        Err(invalid) => {
            eprintln!("retrylab export: {}: {}", invalid.field, invalid.detail);
            return 2;
        }
    };
    let export = export(&policy, library);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&export).expect("the export serializes"));
        return 0;
    }
    print!("{}", export.code);
    for sentence in &export.unsupported {
        eprintln!("retrylab export: not expressed in {}: {sentence}", export.library);
    }
    for sentence in &export.cautions {
        eprintln!("retrylab export: caution: {sentence}");
    }
    0
}

//! Creating consumer groups: the one definition of how Ordo creates a
//! consumer group on a stream.
//!
//! A group is always created at [`FROM_START`], so it reads the stream from
//! its first entry: a group registered after entries were published still
//! gets them. A group that exists already is left as it is. Scripts that
//! must create a group atomically with other work call `create_group` of
//! `lua/common.lua`, which does the same inside Redis.

use fred::interfaces::StreamsInterface;
use fred::types::Value;

use crate::error::Result;

/// Where a new group starts reading: before the stream's first entry.
pub(crate) const FROM_START: &str = "0";

/// What [`create`] does when the stream does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IfNoStream {
    /// Creates it, empty (`MKSTREAM`), with the group on it.
    Create,
    /// Leaves it absent: there is nothing to join (a lane not created yet).
    Skip,
}

/// Creates `group` on `stream`, reading from its start; a group that
/// exists already is left as it is.
///
/// On a pipeline this only queues the command: pass each of the pipeline's
/// replies to [`settle`] with the same `if_no_stream`.
pub(crate) async fn create<C>(client: &C, stream: &str, group: &str, if_no_stream: IfNoStream) -> Result<()>
where
    C: StreamsInterface + Sync,
{
    let reply = client
        .xgroup_create::<Value, _, _, _>(stream, group, FROM_START, if_no_stream == IfNoStream::Create)
        .await;
    settle(reply, if_no_stream)
}

/// The outcome of one `XGROUP CREATE` reply of [`create`]: an existing group
/// (`BUSYGROUP`) is fine, and so is a missing stream with
/// [`IfNoStream::Skip`]; any other error is one.
pub(crate) fn settle(
    reply: std::result::Result<Value, fred::error::Error>,
    if_no_stream: IfNoStream,
) -> Result<()> {
    match reply {
        Err(error) if error.details().starts_with("BUSYGROUP") => Ok(()),
        Err(error) if if_no_stream == IfNoStream::Skip && no_such_stream(&error) => Ok(()),
        Err(error) => Err(error.into()),
        Ok(_) => Ok(()),
    }
}

/// Whether `error` is `XGROUP CREATE` refusing a stream that does not exist.
fn no_such_stream(error: &fred::error::Error) -> bool {
    error.details().contains("requires the key to exist")
}

#[cfg(test)]
mod tests {
    use super::FROM_START;

    /// The `XGROUP CREATE` calls of every script in `src/store/lua`, as
    /// (file name, line).
    fn creations() -> Vec<(String, String)> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/store/lua");
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).expect("src/store/lua is readable") {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let source = std::fs::read_to_string(&path).expect("a script is text");
            for line in source.lines().filter(|line| line.contains("'XGROUP', 'CREATE'")) {
                found.push((name.clone(), line.trim().to_owned()));
            }
        }
        found
    }

    /// The Rust files under `dir` that name `xgroup_create`, as paths
    /// relative to `src`.
    fn rust_creators(dir: &std::path::Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).expect("src is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                rust_creators(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs")
                && std::fs::read_to_string(&path)
                    .expect("a source file is text")
                    .contains(concat!("xgroup", "_create"))
            {
                let src = concat!(env!("CARGO_MANIFEST_DIR"), "/src/");
                found.push(path.to_string_lossy().trim_start_matches(src).to_owned());
            }
        }
    }

    #[test]
    fn only_groups_rs_sends_xgroup_create() {
        let mut found = Vec::new();
        rust_creators(concat!(env!("CARGO_MANIFEST_DIR"), "/src").as_ref(), &mut found);
        found.sort();
        assert_eq!(
            found,
            ["store/groups.rs"],
            "Rust code creates groups through groups::create"
        );
    }

    #[test]
    fn scripts_create_groups_only_in_common_lua_and_from_the_start() {
        let creations = creations();
        assert!(!creations.is_empty(), "common.lua defines create_group");
        for (name, line) in creations {
            assert_eq!(
                name, "common.lua",
                "scripts create groups through common.lua's create_group: {line}"
            );
            assert!(
                line.contains(&format!("stream, group, '{FROM_START}'")),
                "common.lua creates groups where groups::create does: {line}"
            );
        }
    }
}

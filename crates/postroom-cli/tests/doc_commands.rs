//! The shell commands of `README.md` and `docs/`, run so that a page cannot rot. Every fenced
//! `sh` block carries a mark after its language:
//!
//! - `sh runnable`: run here with bash (`-euo pipefail`), with the `postroom` just built first
//!   on the `PATH`, against the test servers; the blocks of one page run in order, in one
//!   scratch directory, so a later block sees what an earlier one made;
//! - `sh syntax-only`: a slow build, a long run or a cloud account: checked with `bash -n`;
//! - `sh tested-by=FILE`: run by the test in `FILE`, which names the page; checked with
//!   `bash -n` here too.
//!
//! A `sh` block with no mark fails, so a new command is run or says why not.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The workspace's root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One fenced code block of a page.
#[derive(Debug)]
struct Block {
    /// The page, relative to the workspace root.
    page: String,
    /// The line of its opening fence (from 1).
    line: usize,
    /// What follows the opening fence: the language and its marks.
    info: String,
    /// Its text, ending in a newline.
    body: String,
}

/// What a shell block's mark asks for.
#[derive(Debug, PartialEq, Eq)]
enum Mark {
    Runnable,
    SyntaxOnly,
    TestedBy(String),
}

impl Block {
    /// Whether it is a shell block.
    fn is_shell(&self) -> bool {
        matches!(
            self.info.split_whitespace().next(),
            Some("sh" | "bash" | "shell" | "console")
        )
    }

    /// The mark of a shell block; an error naming the block when it has none or a mark not
    /// known here.
    fn mark(&self) -> Result<Mark, String> {
        let marks: Vec<&str> = self.info.split_whitespace().skip(1).collect();
        match marks.as_slice() {
            ["runnable"] => Ok(Mark::Runnable),
            ["syntax-only"] => Ok(Mark::SyntaxOnly),
            [m] if m.starts_with("tested-by=") => {
                Ok(Mark::TestedBy(m["tested-by=".len()..].to_string()))
            }
            _ => Err(format!(
                "{}:{}: the shell block `{}` needs one mark: runnable, syntax-only or tested-by=FILE",
                self.page, self.line, self.info
            )),
        }
    }

    /// `page:line`, for messages.
    fn place(&self) -> String {
        format!("{}:{}", self.page, self.line)
    }
}

/// The fenced blocks of `text` (the page `page`): fences at the start of a line.
fn blocks(page: &str, text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        match &mut open {
            None => {
                if let Some(info) = line.strip_prefix("```") {
                    open = Some(Block {
                        page: page.to_string(),
                        line: i + 1,
                        info: info.trim().to_string(),
                        body: String::new(),
                    });
                }
            }
            Some(b) => {
                if line.trim_end() == "```" {
                    out.extend(open.take());
                } else {
                    b.body.push_str(line);
                    b.body.push('\n');
                }
            }
        }
    }
    out
}

/// The pages: `README.md` and every `.md` file under `docs/`, relative to the root, sorted.
fn pages() -> Vec<String> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = format!("{rel}/{name}");
            if entry.file_type().unwrap().is_dir() {
                walk(&entry.path(), &rel, out);
            } else if name.ends_with(".md") {
                out.push(rel);
            }
        }
    }
    let mut out = vec!["README.md".to_string()];
    walk(&root().join("docs"), "docs", &mut out);
    out.sort();
    out
}

/// Every shell block of the pages.
fn shell_blocks() -> Vec<Block> {
    pages()
        .iter()
        .flat_map(|page| {
            let text = std::fs::read_to_string(root().join(page)).unwrap();
            blocks(page, &text)
        })
        .filter(Block::is_shell)
        .collect()
}

/// The marks of `blocks` are all known, and each `tested-by` file exists and names its page.
fn check_marks(blocks: &[Block]) -> Result<(), String> {
    let mut errors = Vec::new();
    for b in blocks {
        match b.mark() {
            Ok(Mark::TestedBy(file)) => match std::fs::read_to_string(root().join(&file)) {
                Ok(test) if test.contains(&b.page) => {}
                Ok(_) => errors.push(format!("{}: {file} does not name {}", b.place(), b.page)),
                Err(e) => errors.push(format!("{}: {file}: {e}", b.place())),
            },
            Ok(_) => {}
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("\n"))
    }
}

/// `bash -n` on a block's text.
fn check_syntax(b: &Block) -> Result<(), String> {
    let out = Command::new("bash")
        .args(["-n", "-c", &b.body])
        .output()
        .unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}: bash -n: {}",
            b.place(),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Run a block with bash in `dir`, the built `postroom` first on the `PATH`.
fn run(b: &Block, dir: &Path) -> Result<(), String> {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_postroom")).parent().unwrap();
    let path = std::env::join_paths(std::iter::once(bin_dir.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &b.body])
        .current_dir(dir)
        .env("PATH", path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} failed ({}):\n{}\n--- stdout\n{}\n--- stderr\n{}",
            b.place(),
            out.status,
            b.body,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Run the runnable blocks of `blocks`, each page's in order in a scratch directory of its
/// own; the first failure.
fn run_all(blocks: &[Block]) -> Result<usize, String> {
    let mut dirs: Vec<(String, tempfile::TempDir)> = Vec::new();
    let mut ran = 0;
    for b in blocks.iter().filter(|b| b.mark() == Ok(Mark::Runnable)) {
        if !dirs.iter().any(|(page, _)| *page == b.page) {
            dirs.push((b.page.clone(), tempfile::tempdir().unwrap()));
        }
        let dir = &dirs.iter().find(|(page, _)| *page == b.page).unwrap().1;
        run(b, dir.path())?;
        ran += 1;
    }
    Ok(ran)
}

#[test]
fn every_shell_block_of_the_docs_is_marked() {
    let blocks = shell_blocks();
    assert!(
        blocks.len() >= 10,
        "the pages have shell blocks: {blocks:?}"
    );
    check_marks(&blocks).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn every_shell_block_of_the_docs_parses() {
    let errors: Vec<String> = shell_blocks()
        .iter()
        .filter_map(|b| check_syntax(b).err())
        .collect();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn the_runnable_commands_of_the_docs_run() {
    let blocks = shell_blocks();
    let ran = run_all(&blocks).unwrap_or_else(|e| panic!("{e}"));
    assert!(ran >= 1, "at least one block is runnable");
}

/// The checks above catch what they are for, on a page made up here.
#[test]
fn a_broken_command_an_unmarked_block_and_bad_syntax_are_caught() {
    let page = "```sh runnable\ntrue\n```\n\n```sh runnable\npostroom parking list --database no/such/dir/x.db\n```\n\n```sh\necho unmarked\n```\n\n```sh syntax-only\nif then fi\n```\n\n```toml\nnot = \"shell\"\n```\n";
    let all = blocks("made-up.md", page);
    assert_eq!(all.len(), 5, "{all:?}");
    let shell: Vec<Block> = all.into_iter().filter(Block::is_shell).collect();
    assert_eq!(shell.len(), 4);

    let marks = check_marks(&shell).unwrap_err();
    assert!(marks.contains("made-up.md:9"), "{marks}");
    assert!(
        check_syntax(&shell[3]).is_err(),
        "`if then fi` does not parse"
    );
    assert!(check_syntax(&shell[0]).is_ok());

    let failed = run_all(&shell).unwrap_err();
    assert!(failed.contains("made-up.md:5 failed"), "{failed}");
    assert!(run_all(&shell[..1]).is_ok(), "`true` runs");
}

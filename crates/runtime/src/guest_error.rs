//! A guest's own account of why it trapped, read from the end of its stderr: a Rust panic's
//! message and location, a Go panic's message and first frame of plugin code, or an uncaught
//! Python exception with its innermost frame.
//!
//! A panic in a guest is a wasm trap whose backtrace names `<wasm function N>` frames (plugins
//! are stripped) and whose advice (`RUST_BACKTRACE=1`) a sandboxed guest cannot follow; what the
//! author needs is what the language runtime printed just before the trap. The host keeps the
//! last [`TAIL_BYTES`] of each call's stderr for this, whatever the output limits dropped.

/// Bytes of a call's stderr kept for the error of a trap. A panic message and its location
/// fit; a long Go goroutine dump is cut at its start, which is where the location is, so the
/// tail is generous. 8 KiB.
pub const TAIL_BYTES: usize = 8 << 10;

/// The last [`TAIL_BYTES`] bytes written, kept as they come.
#[derive(Debug, Default)]
pub(crate) struct Tail(Vec<u8>);

impl Tail {
    /// Appends `bytes`, dropping the oldest beyond [`TAIL_BYTES`].
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
        if self.0.len() > 2 * TAIL_BYTES {
            self.0.drain(..self.0.len() - TAIL_BYTES);
        }
    }

    /// Forgets everything (a new call).
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }

    /// The kept text.
    pub(crate) fn text(&self) -> String {
        let start = self.0.len().saturating_sub(TAIL_BYTES);
        String::from_utf8_lossy(&self.0[start..]).into_owned()
    }
}

/// What the guest's language runtime said about the failure in `stderr`, as one line with the
/// message and its source location; `None` if it printed nothing recognizable.
pub fn describe(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr.lines().collect();
    rust_panic(&lines).or_else(|| go_panic(&lines)).or_else(|| python_exception(&lines))
}

/// `thread '<unnamed>' (1) panicked at src/lib.rs:12:5:` (Rust before 1.91: no thread id) then
/// the message, up to the `note:` line.
fn rust_panic(lines: &[&str]) -> Option<String> {
    let start = lines.iter().rposition(|l| l.starts_with("thread '") && l.contains(" panicked at "))?;
    let location = lines[start].split_once(" panicked at ")?.1.trim_end_matches(':');
    let message: Vec<&str> =
        lines[start + 1..].iter().take_while(|l| !l.starts_with("note: ")).map(|l| l.trim()).collect();
    Some(format!("panicked at {location}: {}", message.join(" ").trim()))
}

/// `panic: message`, then `goroutine 1 [running]:` and frames as `pkg.fn(...)` lines each
/// followed by `\tfile.go:12 +0x1f`; the first frame outside Go's runtime is the plugin's.
fn go_panic(lines: &[&str]) -> Option<String> {
    let start = lines.iter().rposition(|l| l.starts_with("panic: "))?;
    let message = lines[start].trim_start_matches("panic: ").trim();
    let frames = lines[start + 1..].windows(2).filter(|w| w[1].starts_with('\t'));
    let frame = frames.map(|w| (w[0].trim(), w[1].trim())).find(|(function, _)| {
        !function.starts_with("runtime.") && !function.starts_with("panic(") && !function.starts_with("goroutine ")
    });
    Some(match frame {
        Some((function, at)) => {
            let at = at.split(" +0x").next().unwrap_or(at);
            let function = function.split('(').next().unwrap_or(function);
            format!("panic: {message} at {at} in {function}")
        }
        None => format!("panic: {message}"),
    })
}

/// `Traceback (most recent call last):`, `  File "x.py", line 3, in f` frames, then
/// `KeyError: 'x'`.
fn python_exception(lines: &[&str]) -> Option<String> {
    let start = lines.iter().rposition(|l| l.starts_with("Traceback (most recent call last):"))?;
    let rest = &lines[start + 1..];
    let error = rest.iter().rev().find(|l| !l.starts_with(' ') && !l.trim().is_empty())?;
    let frame = rest.iter().rev().find(|l| l.trim_start().starts_with("File \""))?.trim();
    let (file, rest) = frame.trim_start_matches("File \"").split_once("\", line ")?;
    let (line, function) = rest.split_once(", in ").unwrap_or((rest, "?"));
    let file = file.rsplit('/').next().unwrap_or(file);
    Some(format!("{} at {file}:{line} in {function}", error.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rust_panic_gives_its_message_and_location_without_the_backtrace_advice() {
        for thread in ["'<unnamed>'", "'<unnamed>' (1)"] {
            let stderr = format!(
                "some output\n\nthread {thread} panicked at plugins/fixtures/trapper/src/lib.rs:24:13:\n\
                 trapper: panic while reconciling cm\n\
                 note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n"
            );
            assert_eq!(
                describe(&stderr).as_deref(),
                Some("panicked at plugins/fixtures/trapper/src/lib.rs:24:13: trapper: panic while reconciling cm")
            );
        }
    }

    #[test]
    fn a_go_panic_gives_its_message_and_the_first_frame_outside_the_runtime() {
        let stderr = "panic: runtime error: index out of range [3] with length 1\n\n\
                      goroutine 1 [running]:\n\
                      panic({0x1, 0x2})\n\truntime/panic.go:838 +0x2b\n\
                      main.reconcile(...)\n\texample.com/hello/hello.go:42 +0x1f\n\
                      main.main()\n\texample.com/hello/main.go:9 +0x3\n";
        assert_eq!(
            describe(stderr).as_deref(),
            Some(
                "panic: runtime error: index out of range [3] with length 1 at example.com/hello/hello.go:42 in main.reconcile"
            )
        );
    }

    #[test]
    fn an_uncaught_python_exception_gives_its_last_line_and_innermost_frame() {
        let stderr = "Traceback (most recent call last):\n  File \"/app/kubewasm/__init__.py\", line 9, in describe\n\
                      \x20   return f()\n  File \"/app/hello_py.py\", line 31, in welcome\n\
                      \x20   port = spec[\"nodePort\"]\nKeyError: 'nodePort'\n";
        assert_eq!(describe(stderr).as_deref(), Some("KeyError: 'nodePort' at hello_py.py:31 in welcome"));
    }

    #[test]
    fn output_that_is_no_runtime_failure_describes_nothing() {
        assert_eq!(describe("hello\nworld\n"), None);
        assert_eq!(describe(""), None);
    }

    #[test]
    fn the_tail_keeps_the_last_bytes_written() {
        let mut tail = Tail::default();
        for _ in 0..5 {
            tail.push(&[b'x'; TAIL_BYTES]);
        }
        tail.push(b"the end");
        let text = tail.text();
        assert_eq!(text.len(), TAIL_BYTES);
        assert!(text.ends_with("the end"));
        tail.clear();
        assert_eq!(tail.text(), "");
    }
}

//! Answers hyper gives before the app runs (a request head it cannot parse: a header with a
//! control character, headers too large, a URI too long) are a bare status with no body. This
//! wrapper around a connection's socket turns such an answer into `application/problem+json`
//! as it is written, so every error the server sends has the same shape.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connection's socket whose bodiless 4xx answers (hyper's own) are rewritten.
pub struct ProblemsOnly<S> {
    inner: S,
    /// The rewritten answer still to write, and how long the original was.
    pending: Option<(Vec<u8>, usize)>,
}

impl<S> ProblemsOnly<S> {
    pub fn new(inner: S) -> Self {
        ProblemsOnly { inner, pending: None }
    }
}

/// The problem+json answer for a bodiless 4xx head hyper wrote, if `head` is one.
fn rewrite(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    let status_line = text.strip_prefix("HTTP/1.1 ").or_else(|| text.strip_prefix("HTTP/1.0 "))?;
    let status: u16 = status_line.get(..3)?.parse().ok()?;
    let lower = text.to_ascii_lowercase();
    let bare = (400..500).contains(&status)
        && text.ends_with("\r\n\r\n")
        && lower.contains("\r\ncontent-length: 0\r\n")
        && !lower.contains("\r\ncontent-type:");
    if !bare {
        return None;
    }
    let (title, detail) = match status {
        431 => (
            "Request Header Fields Too Large",
            "the request's headers are larger than this server reads; send fewer or smaller headers",
        ),
        414 => ("URI Too Long", "the request's URI is longer than this server reads"),
        _ => (
            "Bad Request",
            "the request's head could not be read (a header holding a control character such as NUL \
             or DEL, say); nothing was done",
        ),
    };
    let kind = title.to_ascii_lowercase().replace(' ', "-");
    let body = serde_json::json!({ "type": format!("/problems/{kind}"), "title": title, "status": status, "detail": detail })
        .to_string();
    let answer = format!(
        "HTTP/1.1 {status} {title}\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    Some(answer.into_bytes())
}

impl<S: AsyncWrite + Unpin> ProblemsOnly<S> {
    /// Writes the rewritten answer; done, it counts as `original` bytes written.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        while let Some((answer, original)) = &mut self.pending {
            if answer.is_empty() {
                let original = *original;
                self.pending = None;
                return Poll::Ready(Ok(original));
            }
            let written = ready!(Pin::new(&mut self.inner).poll_write(cx, answer))?;
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            answer.drain(..written);
        }
        Poll::Ready(Ok(0))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ProblemsOnly<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ProblemsOnly<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.pending.is_none() {
            match rewrite(buf) {
                Some(answer) => self.pending = Some((answer, buf.len())),
                None => return Pin::new(&mut self.inner).poll_write(cx, buf),
            }
        }
        self.drain(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        // Hyper's own error answers are a head alone, in one slice.
        if self.pending.is_none() {
            let head = bufs.iter().find(|b| !b.is_empty());
            let alone = bufs.iter().filter(|b| !b.is_empty()).count() == 1;
            match head.filter(|_| alone).and_then(|head| rewrite(head)) {
                Some(answer) => {
                    let original = bufs.iter().map(|b| b.len()).sum();
                    self.pending = Some((answer, original));
                }
                None => return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs),
            }
        }
        self.drain(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::rewrite;

    #[test]
    fn only_a_bare_4xx_head_is_rewritten() {
        let bare = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let answer = String::from_utf8(rewrite(bare).unwrap()).unwrap();
        assert!(answer.starts_with("HTTP/1.1 400 Bad Request\r\ncontent-type: application/problem+json"));
        let body: serde_json::Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["status"], 400);
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/problem+json\r\ncontent-length: 0\r\n\r\n";
        assert!(rewrite(ours).is_none(), "the app's own answers pass");
        assert!(rewrite(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_none());
    }
}

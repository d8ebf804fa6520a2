//! What a report card says beside a verdict that is not a pass: why, in plain words, and what
//! to change. For the libraries the page gives a snippet for (`static/snippets.json`), it names
//! the library's own setting; for any other caller, the rule in general.

use super::Verdict;
use super::timing::Schedule;

/// The ten checks, by the name the card gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckId {
    RetryAfter,
    Backoff,
    Jitter,
    /// Jitter's verdict when the caller waits a `Retry-After` exactly: no jitter above the header.
    JitterAboveHeader,
    AttemptsCapped,
    KeyReused,
    NoRetryOn4xx,
    Timeouts,
    DeadlineSent,
    AttemptsNumbered,
    PushbackHonoured,
}

/// A caller the page has a snippet for, told by the name it sends (`X-Client-Name`) or, when it
/// sends none, by its library's own `User-Agent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Library {
    Curl,
    Urllib3,
    Tenacity,
    NodeFetch,
    GoNetHttp,
    /// Told by its timing only (`Schedule`): these send no name of their own the lab knows.
    Got,
    AxiosRetry,
    GoRetryableHttp,
    Other,
}

impl Library {
    pub fn of(caller: &str) -> Library {
        let name = caller.to_ascii_lowercase();
        // The snippets' own names, and the User-Agents these libraries send by themselves
        // (Node's fetch sends exactly "node"). A plain Python-urllib caller could be anything.
        let known = [
            ("curl", Library::Curl),
            ("python-urllib3", Library::Urllib3),
            ("python-tenacity", Library::Tenacity),
            ("node-fetch", Library::NodeFetch),
            ("go-net-http", Library::GoNetHttp),
            ("go-http-client", Library::GoNetHttp),
        ];
        if name == "node" {
            return Library::NodeFetch;
        }
        known.into_iter().find(|(prefix, _)| name.starts_with(prefix)).map_or(Library::Other, |(_, l)| l)
    }

    /// The library whose documented schedule the caller's waits match, whatever its name says.
    pub fn of_schedule(schedule: Schedule) -> Library {
        match schedule {
            Schedule::Urllib3 { .. } => Library::Urllib3,
            Schedule::GoRetryableHttp => Library::GoRetryableHttp,
            Schedule::Got => Library::Got,
            Schedule::AxiosRetry => Library::AxiosRetry,
            Schedule::FullJitter => Library::Tenacity,
        }
    }
}

/// Why a check did not pass and what to change; none for a pass.
pub fn advice(check: CheckId, verdict: Verdict, library: Library) -> Option<String> {
    use CheckId::*;
    use Library::*;
    let said: &str = match (verdict, check) {
        (Verdict::Pass, _) => return None,
        (Verdict::NotSeen, RetryAfter) => {
            "nothing to judge yet: no key came again after an answer with Retry-After; put the lab \
             down or throttled while the caller runs"
        }
        (Verdict::NotSeen, Backoff) => {
            "nothing to judge yet: no key failed twice and came again; keep the lab down for a few \
             seconds while the caller runs"
        }
        (Verdict::NotSeen, Jitter) => {
            "nothing to judge yet: it takes several keys failing at one moment (send a few side by \
             side, then put the lab down)"
        }
        (Verdict::NotSeen, AttemptsCapped) => "nothing to judge yet: no key was seen",
        (Verdict::NotSeen, KeyReused) => {
            "nothing to judge yet: nothing was sent again; put the lab down while the caller runs"
        }
        (Verdict::NotSeen, NoRetryOn4xx) => {
            "nothing to judge yet: no key got an answer that no retry fixes (send one with a \
             Content-Type other than JSON to see)"
        }
        (Verdict::NotSeen, Timeouts) => {
            "nothing to judge yet: the caller never gave up on an answer; set the lab slow past its \
             timeout to see it"
        }
        (Verdict::NotSeen, DeadlineSent) => "nothing to judge yet: no request was seen",
        (Verdict::NotSeen, AttemptsNumbered) => {
            "nothing to judge yet: no key was sent again, so no retry carried its number; put the \
             lab down while the caller runs"
        }
        (Verdict::NotSeen, PushbackHonoured) => {
            "nothing to judge yet: the endpoint sends X-Retry-Pushback-Ms only with its pushback \
             defence on (overloaded, with retries_first and pushback), to a retry it sheds from a \
             full line"
        }
        (Verdict::NotJudged, Backoff) => {
            "not enough keys retried alike to judge: send several requests side by side (5 or more) \
             while the lab is down, so that each retry number has waits of several keys"
        }
        (Verdict::NotJudged, Jitter) => {
            "not enough evidence to tell jitter from what the caller's own process adds: send several \
             requests side by side (5 or more) at one instant, on a machine not loaded to the full"
        }
        (_, JitterAboveHeader) => match library {
            Urllib3 => {
                "urllib3 waits a Retry-After it honours exactly, with nothing random on top (its \
                 backoff_jitter applies only to its own backoff): every client told the same header \
                 comes back at one instant. urllib3 has no setting for it; retry in a loop of your own, \
                 or accept it where the server staggers its Retry-After"
            }
            GoRetryableHttp => {
                "go-retryablehttp's DefaultBackoff returns a Retry-After on 429 and 503 as it is: set \
                 client.Backoff to a function that adds a random part on top of it"
            }
            Got => {
                "got waits a Retry-After exactly when one is sent: give retry.calculateDelay a function \
                 that adds a random part on top of retryAfter"
            }
            _ => {
                "it waits exactly the Retry-After, so every client told the same header comes back at one \
                 instant: wait the header plus a random part (e.g. up to half your backoff) on top of it"
            }
        },
        (_, RetryAfter) => match library {
            Curl => {
                "it came back before the server's Retry-After. curl waits a Retry-After on 429 and \
                 503 by itself (curl 7.66 and later); a --retry-max-time shorter than the wait cuts \
                 it short, so give it room"
            }
            Urllib3 => {
                "it came back before the server's Retry-After. Set Retry(respect_retry_after_header=True) \
                 and list 429 and 503 in status_forcelist: urllib3 then waits the header's time"
            }
            Tenacity => {
                "it came back before the server's Retry-After. tenacity's wait strategies do not read \
                 the header: give @retry a wait function returning max(Retry-After, backoff), as the \
                 page's snippet does"
            }
            GoRetryableHttp => {
                "it came back before the server's Retry-After. go-retryablehttp's DefaultBackoff \
                 honours it on 429 and 503; a custom Backoff must read it (resp.Header's Retry-After)"
            }
            Got => {
                "it came back before the server's Retry-After: leave got's retry.maxRetryAfter unset \
                 (or above the header), so got waits it"
            }
            AxiosRetry => {
                "it came back before the server's Retry-After: axios-retry's exponentialDelay does not \
                 wait it by itself in every version; give retryDelay a function returning the larger of \
                 the header and exponentialDelay(...)"
            }
            NodeFetch | GoNetHttp => {
                "it came back before the server's Retry-After. fetch and net/http do not retry by \
                 themselves: in the loop, wait max(Retry-After, backoff), as the page's snippet does"
            }
            Other => {
                "it came back before the server's Retry-After, which says when the server can take \
                 it: wait at least that long (the larger of it and your own backoff), also when a \
                 retry carries a new key"
            }
        },
        (_, Backoff) => match library {
            Curl => {
                "its waits did not grow. curl's --retry waits 1 s and doubles it, but a Retry-After \
                 replaces that wait, so under a steady Retry-After curl's waits stay flat: nothing \
                 in curl changes that (the page's snippet notes it)"
            }
            Urllib3 => {
                "its waits did not grow. When urllib3 honours a Retry-After \
                 (respect_retry_after_header=True) it waits exactly that and skips its own \
                 backoff_factor, so under a steady Retry-After its waits stay flat; keep the header \
                 honoured (the server's word comes first): the page's snippet notes this"
            }
            Tenacity => {
                "its waits did not grow: use wait_exponential_jitter(initial=..., max=...) (or \
                 wait_random_exponential) and take the larger of it and Retry-After"
            }
            GoRetryableHttp | Got | AxiosRetry => {
                "its waits did not grow: these libraries double their wait by themselves; a custom \
                 Backoff, calculateDelay or retryDelay has replaced it: keep it doubling, with a cap"
            }
            NodeFetch | GoNetHttp => {
                "its waits did not grow: double the backoff on each attempt (capped), and wait the \
                 larger of it and Retry-After"
            }
            Other => {
                "its waits did not grow after repeated failures, so a struggling server gets no \
                 more room on the third try than the first: grow the wait each time (double it, \
                 with a cap)"
            }
        },
        (_, Jitter) => match library {
            Curl => {
                "keys that failed together came back together. curl's --retry has no jitter, and \
                 waits a Retry-After exactly; to spread, sleep a random time in a shell loop \
                 around curl"
            }
            Urllib3 => {
                "keys that failed alike came back alike. Retry(backoff_jitter=...) adds a random part \
                 to urllib3's backoff from the second retry on (the first is at once, whatever the \
                 setting), but not to a Retry-After it honours (the page's snippet notes it)"
            }
            Tenacity => {
                "keys that failed together came back together: use wait_exponential_jitter or \
                 wait_random_exponential, and add its random part on top of Retry-After"
            }
            GoRetryableHttp => {
                "keys that failed alike came back alike: go-retryablehttp's DefaultBackoff has no random \
                 part; set client.Backoff = retryablehttp.LinearJitterBackoff, or a backoff of your own \
                 that adds a random part"
            }
            Got | AxiosRetry => {
                "keys that failed alike came back alike: got adds up to 100 ms and axios-retry's \
                 exponentialDelay 0-20 %; pass a delay function with a larger random part"
            }
            NodeFetch | GoNetHttp => {
                "keys that failed together came back together: make part of each wait random \
                 (e.g. half the backoff plus a random half), on top of Retry-After"
            }
            Other => {
                "keys that failed together came back at one instant, which hits the server with \
                 the same burst again: make part of each wait random (full or equal jitter)"
            }
        },
        (_, AttemptsCapped) => match library {
            Curl => "it tried too often for one request: lower --retry (4 is plenty)",
            Urllib3 => "it tried too often for one request: lower Retry(total=...)",
            Tenacity => "it tried too often for one request: stop=stop_after_attempt(5) or fewer",
            NodeFetch | GoNetHttp => "it tried too often for one request: stop the loop after a few attempts",
            Other | Got | AxiosRetry | GoRetryableHttp => {
                "it tried one request too often (retries under new keys count too): cap the \
                 attempts, and give up to a dead-letter queue or the user"
            }
        },
        (_, KeyReused) => match library {
            Curl => {
                "a retry came with a new key: curl --retry sends the same headers each time, so \
                 build the key once, before curl runs, not in a loop around it"
            }
            Urllib3 => {
                "a retry came with a new key: make the Idempotency-Key once per request and let \
                 Retry resend it; don't loop around http.request() with a new uuid"
            }
            Tenacity => {
                "a retry came with a new key: make the key outside the function @retry wraps, so \
                 every attempt sends it"
            }
            NodeFetch | GoNetHttp => "a retry came with a new key: make the key once, before the retry loop",
            Other | Got | AxiosRetry | GoRetryableHttp => {
                "a retry came with a new key, so the server cannot tell it from a new request and \
                 may apply it twice: make the key once per operation and send it with every retry"
            }
        },
        (_, NoRetryOn4xx) => match library {
            Urllib3 => {
                "it retried an answer no retry fixes: leave 400, 404, 413, 415 and 422 out of \
                 status_forcelist"
            }
            Tenacity => {
                "it retried an answer no retry fixes: the retry= predicate should take only 408, \
                 429 and 5xx"
            }
            _ => {
                "it sent again a request the server refused as wrong (400, 404, 413, 415, 422): \
                 the same request fails the same way; retry only 408, 429 and 5xx"
            }
        },
        (_, Timeouts) => match library {
            Curl => "its timeout is long: lower --max-time",
            Urllib3 => "its timeout is long: lower urllib3.Timeout(total=...)",
            Tenacity => "its timeout is long: lower urlopen(..., timeout=...)",
            NodeFetch => "its timeout is long: lower AbortSignal.timeout(...)",
            GoNetHttp => "its timeout is long: lower http.Client{Timeout: ...}",
            Other | Got | AxiosRetry | GoRetryableHttp => {
                "it waited long before giving up, so a stuck server holds it (and its threads) \
                 that long: set a timeout of a few seconds"
            }
        },
        (Verdict::Fail, DeadlineSent) => {
            "the deadline it sent was not the time it waited (or did not parse: a whole number of \
             ms, 1 to 86,400,000): send the time it really waits, or the deadline defence works \
             for a caller already gone"
        }
        (_, DeadlineSent) => match library {
            Curl => {
                "send how long it waits: -H \"X-Request-Timeout-Ms: N\" with N the --max-time in ms \
                 (curl sends the same headers on every --retry, which fits a per-try time)"
            }
            Urllib3 => {
                "send how long it waits: headers={\"X-Request-Timeout-Ms\": ...} with the \
                 urllib3.Timeout(total=...) in ms (Retry sends the same headers again, which fits a \
                 per-try time)"
            }
            Tenacity => {
                "send how long it waits: X-Request-Timeout-Ms with the urlopen(..., timeout=...) in \
                 ms, on every attempt"
            }
            NodeFetch => {
                "send how long it waits: X-Request-Timeout-Ms with the ms given to \
                 AbortSignal.timeout(...)"
            }
            GoNetHttp => {
                "send how long it waits: X-Request-Timeout-Ms with the http.Client Timeout (or the \
                 context's time left) in ms"
            }
            Other | Got | AxiosRetry | GoRetryableHttp => {
                "say in X-Request-Timeout-Ms how long you wait for each answer (ms), so an \
                 overloaded server can drop work you will not wait for (gRPC clients send the same \
                 as grpc-timeout by themselves, Envoy as x-envoy-expected-rq-timeout-ms)"
            }
        },
        (Verdict::Fail, AttemptsNumbered) => match library {
            Curl => {
                "curl sends the same headers on every --retry, so a fixed X-Previous-Attempts is \
                 wrong from the second try: retry in a shell loop and send its count"
            }
            _ => {
                "X-Previous-Attempts must count the requests sent before with this key (0 on the \
                 first, then 1, 2, ...): a wrong count makes the server shed first attempts as \
                 retries, or keep retries as first attempts"
            }
        },
        (_, AttemptsNumbered) => match library {
            Curl => {
                "curl --retry cannot number its tries (it sends the same headers each time): retry \
                 in a shell loop and send -H \"X-Previous-Attempts: $i\""
            }
            Urllib3 => {
                "urllib3's Retry sends the same headers on every try, so it cannot number them: \
                 retry in your own loop (retries=False) and send X-Previous-Attempts with the tries \
                 before"
            }
            Tenacity => {
                "in a `for attempt in Retrying(...)` loop, send attempt.retry_state.attempt_number \
                 - 1 in X-Previous-Attempts"
            }
            NodeFetch | GoNetHttp => {
                "send the loop's count of earlier tries in X-Previous-Attempts (0, or nothing, on \
                 the first)"
            }
            Other | Got | AxiosRetry | GoRetryableHttp => {
                "mark each retry with the attempts made before it in X-Previous-Attempts (gRPC \
                 clients send grpc-previous-rpc-attempts by themselves): an overloaded server can \
                 then shed retries before first attempts"
            }
        },
        (_, PushbackHonoured) => match library {
            Curl => {
                "curl --retry does not read X-Retry-Pushback-Ms and retries the 503: retry in a \
                 shell loop that stops on a negative value (curl -w '%header{x-retry-pushback-ms}', \
                 curl 7.84 and later)"
            }
            Urllib3 => {
                "urllib3's Retry does not read X-Retry-Pushback-Ms: retry in your own loop \
                 (retries=False) and stop when it is negative"
            }
            Tenacity => {
                "make the retry= predicate false when the answer's X-Retry-Pushback-Ms is \
                 negative, and wait exactly its value when it is 0 or more"
            }
            NodeFetch | GoNetHttp => {
                "in the loop, read X-Retry-Pushback-Ms: negative, stop; 0 or more, wait exactly \
                 that long"
            }
            Other | Got | AxiosRetry | GoRetryableHttp => {
                "the server asked it not to retry (a negative X-Retry-Pushback-Ms, as gRPC's \
                 grpc-retry-pushback-ms, which gRPC clients honour by themselves; gRFC A6): stop \
                 on a negative value, and wait exactly a value of 0 or more"
            }
        },
    };
    Some(said.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libraries_are_told_by_their_name_or_agent() {
        assert_eq!(Library::of("curl/8.5.0"), Library::Curl);
        assert_eq!(Library::of("python-urllib3"), Library::Urllib3);
        assert_eq!(Library::of("python-tenacity"), Library::Tenacity);
        assert_eq!(Library::of("Python-urllib/3.12"), Library::Other, "any Python script");
        assert_eq!((Library::of("node"), Library::of("nodemon-thing")), (Library::NodeFetch, Library::Other));
        assert_eq!(Library::of("Go-http-client/1.1"), Library::GoNetHttp);
        assert_eq!(Library::of("billing"), Library::Other);
    }

    #[test]
    fn a_pass_has_no_advice_and_a_fail_names_the_library_s_setting() {
        assert_eq!(advice(CheckId::Jitter, Verdict::Pass, Library::Urllib3), None);
        let urllib3 = advice(CheckId::Backoff, Verdict::Fail, Library::Urllib3).unwrap();
        assert!(urllib3.contains("respect_retry_after_header"), "{urllib3}");
        let curl = advice(CheckId::AttemptsCapped, Verdict::Fail, Library::Curl).unwrap();
        assert!(curl.contains("--retry"), "{curl}");
    }

    #[test]
    fn the_timing_names_the_library_and_waiting_the_header_exactly_is_told_to_add_jitter_above_it() {
        assert_eq!(Library::of_schedule(Schedule::Urllib3 { factor_ms: 500 }), Library::Urllib3);
        assert_eq!(Library::of_schedule(Schedule::FullJitter), Library::Tenacity);
        let go = advice(CheckId::Jitter, Verdict::Fail, Library::GoRetryableHttp).unwrap();
        assert!(go.contains("LinearJitterBackoff"), "{go}");
        let exactly = advice(CheckId::JitterAboveHeader, Verdict::Warn, Library::Other).unwrap();
        assert!(exactly.contains("random part") && exactly.contains("on top of it"), "{exactly}");
        let unjudged = advice(CheckId::Backoff, Verdict::NotJudged, Library::Other).unwrap();
        assert!(unjudged.contains("side by side"), "{unjudged}");
    }
}

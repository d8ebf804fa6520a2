//! The Go program: go-retryablehttp with the lab's wait formula as its `Backoff`.
//!
//! The hooks, as go-retryablehttp 0.7.1 (Debian's golang-github-hashicorp-go-retryablehttp-dev)
//! has them in `client.go`: `Client.Backoff(min, max, attemptNum, resp)` returns each wait
//! (`attemptNum` from 0 after the first failure, `resp` nil after a transport error);
//! `Client.CheckRetry(ctx, resp, err)` decides whether to retry; `RetryMax` counts retries; the
//! request body given to `NewRequest` as bytes is sent again on every attempt.

use super::{ATTEMPT_LIMIT_ONLY, jitter_name, no_time_budget, retry_after_mode_name, seconds};
use crate::retry::Policy;

/// `native`: the policy is go-retryablehttp's own preset, so the program is `NewClient()` as it
/// comes, and what it had to write out goes into `native`.
pub(super) fn program(
    policy: &Policy,
    settings: &str,
    unsupported: &mut Vec<String>,
    native: Option<&mut Vec<String>>,
) -> String {
    if let Some(spelled_out) = native {
        return native_program(policy, settings, spelled_out);
    }
    no_time_budget(policy, "go-retryablehttp", ATTEMPT_LIMIT_ONLY, unsupported);
    let settings: String = settings.lines().map(|l| format!("//   {l}\n")).collect();
    let mode = retry_after_mode_name(policy.retry_after_mode);
    format!(
        r#"// A retrylab policy as a go-retryablehttp 0.7.1 client, written by `retrylab export`.
//
// Sends waves waves of orders POSTs at once, waveGapS apart, each POST with its own
// Idempotency-Key, the same key on every retry, to the endpoint in RETRYLAB_URL or the first
// argument; prints the final statuses. (Two waves, so that a grade's schedule, 3 s down without
// Retry-After and then with it, meets both; and orders sent together, so that their waits can
// show a jitter beside what the process adds.)
// Run: go run this_file.go URL (with Debian's package: GO111MODULE=off GOPATH=/usr/share/gocode).
//
// The lab policy it follows (retrylab's settings):
{settings}
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	mathrand "math/rand"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	retryablehttp "github.com/hashicorp/go-retryablehttp"
)

const (
	orders           = 10
	waves            = 2
	waveGapS         = 3.5
	maxAttempts      = {max_attempts} // the first included
	timeoutS         = {timeout}
	baseS            = {base}
	capS             = {cap}
	multiplier       = {multiplier:?}
	jitter           = "{jitter}"
	jitterS          = {jitter_s} // additive jitter's most
	jitterRatio      = {jitter_ratio:?} // proportional jitter's most
	firstRetryAtOnce = {first}
	honorRetryAfter  = {honor}
	retryAfterMode   = "{mode}"
	retryAfterCapS   = {ra_cap}
)

{statuses}

var (
	lock     sync.Mutex
	previous = map[string]float64{{}} // each order's previous wait, by its key
)

func uniform(low, high float64) float64 {{ return low + mathrand.Float64()*(high-low) }}

func draw(nominal, prev float64) float64 {{
	switch jitter {{
	case "full":
		return uniform(0, nominal)
	case "equal":
		return nominal/2 + uniform(0, nominal/2)
	case "decorrelated":
		high := math.Min(capS, 3*math.Max(prev, baseS))
		return uniform(math.Min(baseS, high), high)
	case "additive":
		return math.Min(math.Max(capS, nominal), nominal+uniform(0, jitterS))
	case "proportional":
		return nominal * (1 + uniform(0, jitterRatio))
	}}
	return nominal
}}

// plannedWait is the wait after failed attempt n (1-based), in seconds, as retrylab plans it;
// after is the Retry-After in seconds, or negative when there was none.
func plannedWait(n int, after float64, key string) float64 {{
	nominal := math.Min(capS, baseS*math.Pow(multiplier, float64(n-1)))
	if firstRetryAtOnce && n == 1 {{
		nominal = 0
	}}
	if !honorRetryAfter || after < 0 {{
		after = -1
	}} else {{
		after = math.Min(after, retryAfterCapS)
	}}
	if after >= 0 && (retryAfterMode == "exact_including_zero" || (retryAfterMode == "exact" && after > 0)) {{
		return after
	}}
	if after >= 0 && retryAfterMode == "nominal_floor" {{
		nominal = math.Max(nominal, after)
		after = -1
	}}
	lock.Lock()
	drawn := draw(nominal, previous[key])
	previous[key] = drawn
	lock.Unlock()
	if after < 0 {{
		return drawn
	}}
	if retryAfterMode == "jitter_above" {{
		return after + drawn
	}}
	return math.Max(drawn, after)
}}

func main() {{
	url := os.Getenv("RETRYLAB_URL")
	if url == "" && len(os.Args) > 1 {{
		url = os.Args[1]
	}}
	client := retryablehttp.NewClient()
	client.Logger = nil
	client.RetryMax = maxAttempts - 1
	client.HTTPClient.Timeout = time.Duration(timeoutS * float64(time.Second))
	client.CheckRetry = func(ctx context.Context, resp *http.Response, err error) (bool, error) {{
		if ctx.Err() != nil {{
			return false, ctx.Err()
		}}
		if err != nil {{
			return true, nil // a transport error or a timeout
		}}
		return retryStatus(resp.StatusCode), nil
	}}
	client.Backoff = func(_, _ time.Duration, attemptNum int, resp *http.Response) time.Duration {{
		after, key := -1.0, ""
		if resp != nil {{
			key = resp.Request.Header.Get("Idempotency-Key")
			if header := strings.TrimSpace(resp.Header.Get("Retry-After")); header != "" {{
				if s, err := strconv.ParseUint(header, 10, 32); err == nil {{
					after = float64(s)
				}}
			}}
		}}
		return time.Duration(plannedWait(attemptNum+1, after, key) * float64(time.Second))
	}}
{send_orders}"#,
        send_orders = SEND_ORDERS,
        max_attempts = policy.max_attempts,
        timeout = seconds(policy.timeout_ms),
        base = seconds(policy.base_ms),
        cap = seconds(policy.cap_ms),
        multiplier = policy.multiplier,
        jitter = jitter_name(policy.jitter),
        jitter_s = seconds(policy.jitter_ms),
        jitter_ratio = policy.jitter_ratio,
        first = policy.first_retry_at_once,
        honor = policy.honor_retry_after,
        ra_cap = seconds(policy.retry_after_cap_ms),
        statuses = match &policy.retry_statuses {
            Some(listed) => {
                let cases: Vec<String> = listed.iter().map(u16::to_string).collect();
                format!(
                    "// The statuses the policy retries.\nfunc retryStatus(status int) bool {{\n\tswitch status {{\n\tcase {}:\n\t\treturn true\n\t}}\n\treturn false\n}}",
                    cases.join(", ")
                )
            }
            None => "// The lab's transient answers: 408, 409 (the key still in work), 429 and every 5xx.\n\
                     func retryStatus(status int) bool {\n\
                     \treturn status == 408 || status == 409 || status == 429 || (status >= 500 && status < 600)\n\
                     }"
                .to_owned(),
        },
    )
}

fn native_program(policy: &Policy, settings: &str, spelled_out: &mut Vec<String>) -> String {
    spelled_out.push(format!(
        "timeout {} s: the policy's timeout_ms (go-retryablehttp's http.Client has none)",
        seconds(policy.timeout_ms)
    ));
    let settings: String = settings.lines().map(|l| format!("//   {l}\n")).collect();
    format!(
        r#"// The go-retryablehttp preset as go-retryablehttp 0.7.1 itself, written by `retrylab export`:
// NewClient() as it comes (4 retries, 1 s doubling to 30 s, no jitter, Retry-After on a 429 or
// 503 waited exactly, 429 and 5xx but 501 retried), with only the timeout written out.
//
// Sends waves waves of orders POSTs at once, waveGapS apart, each POST with its own
// Idempotency-Key, the same key on every retry, to the endpoint in RETRYLAB_URL or the first
// argument; prints the final statuses.
// Run: go run this_file.go URL (with Debian's package: GO111MODULE=off GOPATH=/usr/share/gocode).
//
// The lab policy it follows (retrylab's settings):
{settings}
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	retryablehttp "github.com/hashicorp/go-retryablehttp"
)

const (
	orders   = 10
	waves    = 2
	waveGapS = 3.5
	timeoutS = {timeout}
)

func main() {{
	url := os.Getenv("RETRYLAB_URL")
	if url == "" && len(os.Args) > 1 {{
		url = os.Args[1]
	}}
	client := retryablehttp.NewClient()
	client.Logger = nil
	client.HTTPClient.Timeout = time.Duration(timeoutS * float64(time.Second))
{send_orders}"#,
        timeout = seconds(policy.timeout_ms),
        send_orders = SEND_ORDERS,
    )
}

/// The end of `main` in both programs: the waves of orders, each a POST with its own key sent
/// again on each retry by `client`, and the final statuses printed.
const SEND_ORDERS: &str = r#"	statuses := make([]string, orders*waves)
	var wg sync.WaitGroup
	for n := range statuses {
		wg.Add(1)
		go func(n int) {
			defer wg.Done()
			time.Sleep(time.Duration(float64(n/orders) * waveGapS * float64(time.Second)))
			random := make([]byte, 16)
			rand.Read(random)
			key := hex.EncodeToString(random) // one key per order, sent again on each of its retries
			body := []byte(fmt.Sprintf(`{"order": "%s", "n": %d}`, key, n))
			request, err := retryablehttp.NewRequest("POST", url, bytes.NewReader(body))
			if err != nil {
				statuses[n] = err.Error()
				return
			}
			request.Header.Set("Content-Type", "application/json")
			request.Header.Set("Idempotency-Key", key)
			response, err := client.Do(request)
			if err != nil {
				statuses[n] = "gave up"
				return
			}
			response.Body.Close()
			statuses[n] = strconv.Itoa(response.StatusCode)
		}(n)
	}
	wg.Wait()
	fmt.Println(statuses)
}
"#;

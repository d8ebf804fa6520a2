// go-retryablehttp's `NewClient()` with its default policy and backoff, 20 POSTs with a body.
//
// What go-retryablehttp 0.7.1 (Debian's golang-github-hashicorp-go-retryablehttp-dev) does
// (client.go):
//   - Retry-After: `DefaultBackoff` sleeps exactly the header's seconds after a 429 or a 503;
//     after any other failure it backs off.
//   - Backoff: `2 ** attemptNum * RetryWaitMin` (attemptNum from 0), `RetryWaitMin` 1 s, capped
//     at `RetryWaitMax` 30 s: 1, 2, 4, 8 s.
//   - Jitter: none (`LinearJitterBackoff` has some; the default does not).
//   - Statuses: `DefaultRetryPolicy` retries 429, every 5xx but 501, and connection errors; any
//     method (the body is replayed from the bytes given to `NewRequest`).
//   - Attempts: `RetryMax` retries, 4 by default; 5 here, as for the other libraries.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"

	retryablehttp "github.com/hashicorp/go-retryablehttp"
)

func main() {
	url := os.Getenv("RETRYLAB_URL")
	if url == "" && len(os.Args) > 1 {
		url = os.Args[1]
	}
	client := retryablehttp.NewClient()
	client.RetryMax = 5
	statuses := make([]int, 20)
	var wg sync.WaitGroup
	for n := range statuses {
		wg.Add(1)
		go func(n int) {
			defer wg.Done()
			random := make([]byte, 16)
			rand.Read(random)
			key := hex.EncodeToString(random) // one key per order, sent again on each of its retries
			body := []byte(fmt.Sprintf(`{"order": "%s", "n": %d}`, key, n))
			request, err := retryablehttp.NewRequest("POST", url, body)
			if err != nil {
				panic(err)
			}
			request.Header.Set("Content-Type", "application/json")
			request.Header.Set("Idempotency-Key", key)
			response, err := client.Do(request)
			if err != nil {
				return
			}
			response.Body.Close()
			statuses[n] = response.StatusCode
		}(n)
	}
	wg.Wait()
	fmt.Println(statuses)
}

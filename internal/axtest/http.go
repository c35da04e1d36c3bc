package axtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/stretchr/testify/require"
)

// callTimeout bounds one management API call of [Call].
const callTimeout = 30 * time.Second

// Call makes one management API call of verb on api with req, decoding the
// reply into resp (nil: the reply is read and dropped), bounded by 30 s.
// It returns the call's error, for the test to check.
func Call(api *admin.Client, verb string, req, resp any) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if resp == nil {
		resp = &json.RawMessage{}
	}
	return api.Call(ctx, verb, req, resp)
}

// Scraped returns the body of a GET of url (a metrics endpoint), or the
// error that kept it from being read: for a wait that retries until the
// endpoint answers.
func Scraped(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return string(body), nil
}

// Scrape returns the body of a GET of url (a metrics endpoint), failing t
// if it cannot be read.
func Scrape(t testing.TB, url string) string {
	t.Helper()
	body, err := Scraped(url)
	require.NoError(t, err)
	return body
}

// ScrapeHandler returns what h serves to a GET of "/" (a metrics
// handler's exposition text), failing t if it cannot be read.
func ScrapeHandler(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	return Scrape(t, srv.URL)
}

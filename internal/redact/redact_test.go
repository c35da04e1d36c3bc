package redact

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestString(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"user and password", "nats://worker:s3cret@10.0.0.1:4222", "nats://worker:xxxxx@10.0.0.1:4222"},
		{"token", "connect to tls://t0ken@host:4222: refused", "connect to tls://xxxxx@host:4222: refused"},
		{"list", "nats://a:p1@h1:4222,nats://b:p2@h2:4222", "nats://a:xxxxx@h1:4222,nats://b:xxxxx@h2:4222"},
		{"quoted in a parse error", `parse "nats://u:p%zz@h": invalid URL escape`, `parse "nats://u:xxxxx@h": invalid URL escape`},
		{"no secret", "nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"email is not a URL", "mail ops@example.com", "mail ops@example.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, String(tc.in))
		})
	}
}

func TestErrorKeepsTheChain(t *testing.T) {
	err := Error(fmt.Errorf("connect to nats://u:pw@h:1: %w", io.EOF))
	require.Equal(t, "connect to nats://u:xxxxx@h:1: EOF", err.Error())
	require.ErrorIs(t, err, io.EOF)
	plain := errors.New("nothing secret")
	require.Same(t, plain, Error(plain))
	require.NoError(t, Error(nil))
}

func TestWriter(t *testing.T) {
	var out strings.Builder
	n, err := Writer(&out).Write([]byte(`{"msg":"reconnect","url":"nats://u:pw@h:4222"}` + "\n"))
	require.NoError(t, err)
	require.Equal(t, 47, n)
	require.Equal(t, `{"msg":"reconnect","url":"nats://u:xxxxx@h:4222"}`+"\n", out.String())
}

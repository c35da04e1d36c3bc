package ax_test

import (
	"context"
	"testing"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/stretchr/testify/require"
)

// welcome is the args of a "welcome" task.
type welcome struct {
	To string `json:"to"`
}

func (welcome) Kind() string { return "welcome" }

func TestSubmitJSONWritesKindAndPayloadOnce(t *testing.T) {
	t.Parallel()
	b := axtest.Setup(t, axtest.Options{})
	ctx := context.Background()
	info, err := b.Client.SubmitJSON(ctx, welcome{To: "ada@example.com"}, &ax.TaskSpec{Tenant: "acme", Priority: ax.P1})
	require.NoError(t, err)
	require.Equal(t, "welcome", info.Type)
	require.Equal(t, "AX_P1", info.Stream)
	rec := b.Get(t, info.ID) // READY in its bucket: its record is written at the claim
	require.Equal(t, "welcome", rec.Type)
	require.Equal(t, "acme", rec.Tenant)

	info, err = b.Client.SubmitJSON(ctx, welcome{To: "bob@example.com"}, nil)
	require.NoError(t, err, "nil options are the defaults")
	require.Equal(t, "AX_P2", info.Stream)
}

func TestSpecOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts *ax.TaskSpec
		want string // error text; empty: none
	}{
		{"nil options", nil, ""},
		{"same type", &ax.TaskSpec{Type: "welcome"}, ""},
		{"other type", &ax.TaskSpec{Type: "email"}, `Type "email" is not the args' kind "welcome"`},
		{"payload", &ax.TaskSpec{Payload: []byte("x")}, "Payload is set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task, err := ax.SpecOf(welcome{To: "ada@example.com"}, tc.opts)
			if tc.want != "" {
				require.ErrorIs(t, err, ax.ErrInvalidTask)
				require.ErrorContains(t, err, tc.want)
				return
			}
			require.NoError(t, err)
			require.Equal(t, "welcome", task.Type)
			require.JSONEq(t, `{"to":"ada@example.com"}`, string(task.Payload))
		})
	}
}

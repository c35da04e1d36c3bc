package streams_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/stretchr/testify/require"
)

// TestZeroNamesAreTheDefault calls every method of Names on the zero value
// and on DefaultNames with the same arguments: a zero Names is the default
// deployment, so no caller needs a fallback of its own.
func TestZeroNamesAreTheDefault(t *testing.T) {
	t.Parallel()
	zero, def := reflect.ValueOf(streams.Names{}), reflect.ValueOf(streams.DefaultNames())
	typ := zero.Type()
	require.Positive(t, typ.NumMethod())
	for i := range typ.NumMethod() {
		m := typ.Method(i)
		t.Run(m.Name, func(t *testing.T) {
			args := sampleArgs(t, m.Type)
			got := zero.Method(i).Call(args)
			want := def.Method(i).Call(args)
			require.Equal(t, render(want), render(got))
		})
	}
	require.Equal(t, "ax", streams.Names{}.Prefix())
	require.Equal(t, "AX_P2", streams.Names{}.PriorityStream(2))
}

// sampleArgs returns an argument of each parameter of a method (the first
// parameter is the receiver): a valid token for strings, 1 for numbers, a new
// value for pointers and maps.
func sampleArgs(t *testing.T, m reflect.Type) []reflect.Value {
	var args []reflect.Value
	for i := 1; i < m.NumIn(); i++ {
		v := reflect.New(m.In(i)).Elem()
		switch v.Kind() {
		case reflect.String:
			v.SetString("ax.p1.2.acme.email.k")
		case reflect.Int, reflect.Int64, reflect.Int32:
			v.SetInt(1)
		case reflect.Uint64, reflect.Uint32, reflect.Uint:
			v.SetUint(1)
		case reflect.Pointer:
			v.Set(reflect.New(v.Type().Elem()))
		case reflect.Map:
			v.Set(reflect.MakeMap(v.Type()))
		default:
			// Zero values of other kinds (structs, slices) are fine.
		}
		args = append(args, v)
	}
	return args
}

func render(vs []reflect.Value) []string {
	var out []string
	for _, v := range vs {
		out = append(out, fmt.Sprintf("%+v", v.Interface()))
	}
	return out
}

// TestProvisionNilConfig provisions with a nil config: the default
// deployment's streams.
func TestProvisionNilConfig(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	_, err := streams.Provision(context.Background(), js, nil)
	require.NoError(t, err)
	_, err = js.Stream(context.Background(), "AX_P0")
	require.NoError(t, err)
}

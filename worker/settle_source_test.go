package worker_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// answerMethods are the methods of a JetStream message that answer it.
var answerMethods = map[string]bool{"Ack": true, "DoubleAck": true, "Nak": true, "NakWithDelay": true, "Term": true, "TermWithReason": true}

// answerPayloads are the acknowledgement payloads a raw publish could send
// instead (nats-server server/consumer.go).
var answerPayloads = []string{"+ACK", "-NAK", "+TERM", "+NXT"}

// Every answer the worker gives JetStream goes through the settle stage:
// no file of the worker's packages but settle.go calls or names a
// message's Ack, Nak or Term (or spells an acknowledgement payload).
func TestOnlySettleAnswers(t *testing.T) {
	t.Parallel()
	var found []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || path == "settle.go" {
			return nil
		}
		found = append(found, answers(t, path)...)
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, found, "the worker answers a message only in settle.go")
}

func TestAnswersAreFound(t *testing.T) {
	t.Parallel()
	const src = `package p

func f(d *delivery, msg jetstream.Msg) {
	_ = msg.Ack()
	_ = d.msg.NakWithDelay(time.Second)
	_ = d.settle(d.msg.Term)
	_ = d.msg.TermWithReason("x")
	answer := msg.Nak
	_ = answer
	_ = nc.Publish(msg.Reply(), []byte("+ACK"))
	_ = msg.Reply() // not an answer
	d.ack()         // the stage's own verbs
}
`
	path := filepath.Join(t.TempDir(), "p.go")
	require.NoError(t, os.WriteFile(path, []byte(src), 0o600))
	require.Len(t, answers(t, path), 6)
}

// answers returns the places in one file that answer a message.
func answers(t *testing.T, path string) []string {
	t.Helper()
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	require.NoError(t, err, "parse %s", path)
	var out []string
	ast.Inspect(file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if answerMethods[n.Sel.Name] {
				out = append(out, fset.Position(n.Pos()).String()+": "+n.Sel.Name)
			}
		case *ast.BasicLit:
			if n.Kind == token.STRING {
				v, _ := strconv.Unquote(n.Value)
				for _, p := range answerPayloads {
					if strings.HasPrefix(v, p) {
						out = append(out, fset.Position(n.Pos()).String()+": "+v)
					}
				}
			}
		}
		return true
	})
	return out
}

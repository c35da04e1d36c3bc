package ax_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestArchitectureDocs: docs/ARCHITECTURE.md stays an overview of at most
// 300 lines; every relative link in it and in docs/decisions/ names a file
// that exists; and every decision page is listed in docs/decisions/README.md
// and linked from the overview.
func TestArchitectureDocs(t *testing.T) {
	t.Parallel()
	overview, err := os.ReadFile("docs/ARCHITECTURE.md")
	require.NoError(t, err)
	require.LessOrEqual(t, strings.Count(string(overview), "\n"), 300, "docs/ARCHITECTURE.md is an overview: decisions go to docs/decisions/")

	index, err := os.ReadFile("docs/decisions/README.md")
	require.NoError(t, err)
	pages, err := filepath.Glob("docs/decisions/*.md")
	require.NoError(t, err)
	require.NotEmpty(t, pages)
	for _, page := range pages {
		name := filepath.Base(page)
		if name == "README.md" {
			continue
		}
		require.Contains(t, string(index), "]("+name+")", "docs/decisions/README.md lists %s", name)
		require.Contains(t, string(overview), "](decisions/"+name+")", "docs/ARCHITECTURE.md links %s", name)
	}

	link := regexp.MustCompile(`\]\(([^)#:\s]+)(#[^)]*)?\)`)
	for _, doc := range append([]string{"docs/ARCHITECTURE.md"}, pages...) {
		text, err := os.ReadFile(doc)
		require.NoError(t, err)
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			target := filepath.Join(filepath.Dir(doc), m[1])
			_, err := os.Stat(target)
			require.NoError(t, err, "%s links %s", doc, m[1])
		}
	}
}

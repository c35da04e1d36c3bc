package dashboard_test

import (
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/dashboard"
	"github.com/stretchr/testify/require"
)

// Every link docs/DASHBOARD.md gives ("Links") names a page the app
// routes, and the data that page asks for is served: a task's page of a
// real task of a tenant, the searches with the documented filters.
func TestDocumentedLinks(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/DASHBOARD.md")
	require.NoError(t, err)
	app, err := os.ReadFile("assets/app.js")
	require.NoError(t, err)
	pagesBlock := regexp.MustCompile(`(?s)const pages = \{(.*?)\};`).FindSubmatch(app)
	require.NotNil(t, pagesBlock, "app.js routes its pages in const pages")
	routed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(\w+|"")\s*:\s*\[`).FindAllSubmatch(pagesBlock[1], -1) {
		routed[strings.Trim(string(m[1]), `"`)] = true
	}

	b := setup(t, dashboard.Config{})
	id := b.Submit(t, ax.TaskSpec{Type: "email", Tenant: "acme"})
	_, err = b.Client.SubmitWorkflow(t.Context(), (&ax.Workflow{ID: "order-1", Tenant: "acme"}).Add("charge", ax.TaskSpec{Type: "charge"}))
	require.NoError(t, err)
	links := regexp.MustCompile("(?m)^\\| `(#/[^`]*)` \\|").FindAllSubmatch(doc, -1)
	require.GreaterOrEqual(t, len(links), 7, "the Links table of docs/DASHBOARD.md")
	for _, m := range links {
		link := string(m[1])
		path, query, _ := strings.Cut(strings.TrimPrefix(link, "#/"), "?")
		page, rest, _ := strings.Cut(path, "/")
		require.True(t, routed[page], "%s: app.js routes no page %q", link, page)
		params, err := url.ParseQuery(query)
		require.NoError(t, err, link)
		var api string
		switch page {
		case "":
			api = "/api/overview"
		case "task":
			require.Equal(t, "<id>", rest, link)
			require.Equal(t, "<tenant>", params.Get("tenant"), link)
			api = "/api/tasks/" + url.PathEscape(id) + "?tenant=acme"
		case "workflow":
			require.Equal(t, "<id>", rest, link)
			require.Equal(t, "<tenant>", params.Get("tenant"), link)
			api = "/api/workflows/order-1?tenant=acme"
		default:
			api = "/api/" + page + "?" + query
		}
		var reply map[string]any
		require.Equal(t, http.StatusOK, b.get(t, api, &reply), "%s: GET %s", link, api)
		if page == "tasks" {
			var found admin.TasksListReply
			require.Equal(t, http.StatusOK, b.get(t, "/api/tasks?type=email&tenant=acme&state=READY", &found))
			require.Len(t, found.Tasks, 1, "the search's filters as the link names them")
		}
	}
}

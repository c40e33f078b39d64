// Package webui serves fmgate's embedded web pages: the MangaAssist chat page
// at / (and, when built, the dashboards). Everything is compiled into the
// binary with go:embed, so the gateway needs no files at run time.
package webui

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed static
var static embed.FS

// Handler serves the chat page and its assets to GET and HEAD; any other
// request — another method, a path that is no page — goes to other (nil:
// a plain 404), so that an API client sent to a path fmgate does not serve
// gets an answer it can read.
func Handler(other http.Handler) http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	if other == nil {
		other = http.NotFoundHandler()
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isPage(sub, r) {
			other.ServeHTTP(w, r)
			return
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; style-src 'self'")
		files.ServeHTTP(w, r)
	})
}

// isPage reports whether r asks for one of the embedded files (or the
// index at /).
func isPage(files fs.FS, r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	name := strings.TrimPrefix(path.Clean(r.URL.Path), "/")
	if name == "" {
		name = "index.html"
	}
	st, err := fs.Stat(files, name)
	return err == nil && !st.IsDir()
}

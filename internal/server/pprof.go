package server

import (
	"net/http"
	"net/http/pprof"
)

// pprofHandler serves the Go runtime profiles at /debug/pprof/; Handler
// puts it behind the admin token, so operators can profile their own
// deployment:
//
//	curl -H "Authorization: Bearer $TOKEN" -o cpu.pprof 'http://127.0.0.1:8080/debug/pprof/profile?seconds=30'
//	go tool pprof cpu.pprof
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

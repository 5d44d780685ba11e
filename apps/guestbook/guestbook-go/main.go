// A small guestbook: GET / lists the entries, POST / with an "entry" form value adds one,
// GET /healthz answers ok. Entries live in memory.
package main

import (
	"fmt"
	"html"
	"log"
	"net/http"
	"os"
	"sync"
)

type guestbook struct {
	mu      sync.Mutex
	entries []string
}

func (g *guestbook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		entry := r.FormValue("entry")
		if entry == "" {
			http.Error(w, "empty entry", http.StatusBadRequest)
			return
		}
		g.mu.Lock()
		g.entries = append(g.entries, entry)
		g.mu.Unlock()
		http.Redirect(w, r, "/", http.StatusSeeOther)
	case http.MethodGet:
		g.mu.Lock()
		defer g.mu.Unlock()
		fmt.Fprintln(w, "<h1>Guestbook</h1><ul>")
		for _, entry := range g.entries {
			fmt.Fprintf(w, "<li>%s</li>\n", html.EscapeString(entry))
		}
		fmt.Fprintln(w, `</ul><form method="post"><input name="entry"><button>Sign</button></form>`)
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "3000"
	}
	mux := http.NewServeMux()
	mux.Handle("/", &guestbook{})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	log.Printf("guestbook listening on :%s", port)
	log.Fatal(http.ListenAndServe(":"+port, mux))
}

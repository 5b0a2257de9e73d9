// Command authproxy forwards every request to the daemon with a bearer
// token added, keeping the Host and Origin headers as sent: the MCP
// conformance suite has no way to send a token, and its DNS-rebinding
// scenario must reach /mcp with the Host it chose.
//
//	authproxy -listen 127.0.0.1:0 -to http://127.0.0.1:8080 -token-file F
//
// It prints its address on stdout once it listens.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	to := flag.String("to", "", "the daemon's base URL")
	tokenFile := flag.String("token-file", "", "file holding the bearer token to add")
	flag.Parse()
	target, err := url.Parse(*to)
	if err != nil || target.Host == "" {
		log.Fatalf("authproxy: -to %q: want http://host:port", *to)
	}
	b, err := os.ReadFile(*tokenFile)
	if err != nil {
		log.Fatalf("authproxy: %v", err)
	}
	token := strings.TrimSpace(string(b))
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host // the suite's Host, as sent
			r.Out.Header.Set("Authorization", "Bearer "+token)
		},
		FlushInterval: -1, // SSE: pass every write on at once
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("authproxy: %v", err)
	}
	fmt.Println(ln.Addr().String())
	log.Fatal(http.Serve(ln, proxy))
}

// Package forgetest is a fake Gitea API for tests. It answers the calls
// reconcile makes with the JSON Gitea 1.25 serves — its templates are a
// pull request, a repository and a branch commit copied from real
// deliveries of Gitea 1.25.4 — and it counts every request.
package forgetest

import (
	"cmp"
	"embed"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

//go:embed testdata/*.json
var templates embed.FS

// Pull is a pull request as the fake serves it.
type Pull struct {
	Number  int64
	State   string // "open" or "closed"
	Merged  bool
	HeadRef string
	HeadSHA string
}

// Comment is a comment on an issue or pull request, or a review of a
// pull request, as the fake serves it.
type Comment struct {
	ID      int64
	Body    string
	Updated time.Time
}

type repo struct {
	id       int64
	fullName string
	branches map[string]string // name → head
	pulls    map[int64]Pull
	comments map[int64][]Comment // issue or PR number → comments, oldest first
	reviews  map[int64][]Comment // PR number → reviews, oldest first
}

// CommitStatus is a commit status as a client set it.
type CommitStatus struct {
	State, Description, TargetURL, Context string
}

// Server is the fake forge. Configure it with AddRepo, SetBranch, SetPull,
// DeleteBranch and Rename; Intercept answers requests before it does.
type Server struct {
	*httptest.Server
	// Token, when set, must come as "Authorization: token <Token>", as the
	// SDK sends it; other requests get 401.
	Token string

	mu        sync.Mutex
	repos     map[string]*repo  // lower(full name) → repo
	moved     map[string]string // lower(old full name) → new full name
	paths     []string
	inFlight  int
	maxFlight int
	intercept func(w http.ResponseWriter, r *http.Request) bool
	oauth     *oauthState
	statuses  map[string][]CommitStatus // lower(full name)@sha → statuses set, oldest first
}

// personal says r is a signed-in person's: the OAuth2 routes and what
// their tokens read, which the daemon's token does not authorize.
func (s *Server) personal(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, "/login/oauth/") || r.URL.Path == "/api/v1/user" || strings.HasPrefix(r.URL.Path, "/api/v1/user/")
}

// New starts a fake forge that stops when t ends.
func New(t testing.TB) *Server {
	s := &Server{repos: map[string]*repo{}, moved: map[string]string{}, statuses: map[string][]CommitStatus{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/repos/{owner}/{name}/branches/{branch...}", s.branch)
	mux.HandleFunc("GET /api/v1/repos/{owner}/{name}/pulls/{index}", s.pull)
	mux.HandleFunc("GET /api/v1/repos/{owner}/{name}/pulls", s.pulls)
	mux.HandleFunc("GET /api/v1/repos/{owner}/{name}/pulls/{index}/reviews", s.listReviews)
	mux.HandleFunc("GET /api/v1/repos/{owner}/{name}/issues/{index}/comments", s.listComments)
	mux.HandleFunc("GET /api/v1/repos/{owner}/{name}", s.repo)
	mux.HandleFunc("POST /api/v1/repos/{owner}/{name}/statuses/{sha}", s.createStatus)
	s.oauthRoutes(mux)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.paths = append(s.paths, r.URL.Path)
		s.inFlight++
		s.maxFlight = max(s.maxFlight, s.inFlight)
		intercept := s.intercept
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.inFlight--
			s.mu.Unlock()
		}()
		if s.Token != "" && r.Header.Get("Authorization") != "token "+s.Token && !s.personal(r) {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"message": "token is required", "url": s.URL + "/api/swagger"})
			return
		}
		if intercept != nil && intercept(w, r) {
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// AddRepo creates a repository with its forge id.
func (s *Server) AddRepo(id int64, fullName string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.repos[strings.ToLower(fullName)] = &repo{id: id, fullName: fullName, branches: map[string]string{}, pulls: map[int64]Pull{},
		comments: map[int64][]Comment{}, reviews: map[int64][]Comment{}}
}

// SetBranch points a branch of repository name at head, creating it if needed.
func (s *Server) SetBranch(name, branch, head string) {
	s.with(name, func(r *repo) { r.branches[branch] = head })
}

// DeleteBranch deletes a branch: the forge answers 404 for it.
func (s *Server) DeleteBranch(name, branch string) {
	s.with(name, func(r *repo) { delete(r.branches, branch) })
}

// SetPull creates or replaces a pull request of repository name.
func (s *Server) SetPull(name string, p Pull) { s.with(name, func(r *repo) { r.pulls[p.Number] = p }) }

// AddComment adds a comment to issue or pull request number.
func (s *Server) AddComment(name string, number int64, c Comment) {
	s.with(name, func(r *repo) { r.comments[number] = append(r.comments[number], c) })
}

// AddReview adds a review to pull request number.
func (s *Server) AddReview(name string, number int64, c Comment) {
	s.with(name, func(r *repo) { r.reviews[number] = append(r.reviews[number], c) })
}

// Statuses are the commit statuses set on sha of repository name, oldest
// first.
func (s *Server) Statuses(name, sha string) []CommitStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.statuses[strings.ToLower(name)+"@"+strings.ToLower(sha)])
}

// Rename renames a repository, keeping its id; the old name redirects (301)
// to the new one, as Gitea's RedirectToRepo does.
func (s *Server) Rename(oldName, newName string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[strings.ToLower(oldName)]
	delete(s.repos, strings.ToLower(oldName))
	r.fullName = newName
	s.repos[strings.ToLower(newName)] = r
	s.moved[strings.ToLower(oldName)] = newName
}

// Intercept installs fn in front of the fake: it answers a request by
// returning true (e.g. with a 503), or lets the fake answer. nil removes it.
func (s *Server) Intercept(fn func(w http.ResponseWriter, r *http.Request) bool) {
	s.mu.Lock()
	s.intercept = fn
	s.mu.Unlock()
}

// Calls is the number of requests served since the last ResetCalls.
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.paths)
}

// Paths are the paths of the requests served since the last ResetCalls.
func (s *Server) Paths() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.paths...)
}

// MaxInFlight is the most requests the fake served at once since the
// last ResetCalls.
func (s *Server) MaxInFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxFlight
}

// ResetCalls forgets the requests served so far.
func (s *Server) ResetCalls() {
	s.mu.Lock()
	s.paths, s.maxFlight = nil, 0
	s.mu.Unlock()
}

// Status returns an interceptor answering every request whose path
// contains pathPart with status and Gitea's error body; retryAfter, when
// not empty, is sent as Retry-After.
func Status(pathPart string, status int, retryAfter string) func(http.ResponseWriter, *http.Request) bool {
	return func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.Contains(r.URL.Path, pathPart) {
			return false
		}
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		writeJSON(w, status, map[string]any{"message": http.StatusText(status), "url": "/api/swagger"})
		return true
	}
}

func (s *Server) with(name string, fn func(*repo)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[strings.ToLower(name)]
	if r == nil {
		panic("forgetest: no repository " + name)
	}
	fn(r)
}

// lookup finds the repository a request names, or answers for it: 301 to
// the new name of a renamed repository, 404 for an unknown one.
func (s *Server) lookup(w http.ResponseWriter, req *http.Request) (repo, bool) {
	name := req.PathValue("owner") + "/" + req.PathValue("name")
	s.mu.Lock()
	defer s.mu.Unlock()
	if newName, ok := s.moved[strings.ToLower(name)]; ok && s.repos[strings.ToLower(name)] == nil {
		http.Redirect(w, req, strings.Replace(req.URL.Path, "/repos/"+name, "/repos/"+newName, 1), http.StatusMovedPermanently)
		return repo{}, false
	}
	r := s.repos[strings.ToLower(name)]
	if r == nil {
		notFound(w)
		return repo{}, false
	}
	cp := *r
	cp.branches, cp.pulls = maps.Clone(r.branches), maps.Clone(r.pulls)
	cp.comments, cp.reviews = maps.Clone(r.comments), maps.Clone(r.reviews)
	return cp, true
}

func (s *Server) branch(w http.ResponseWriter, req *http.Request) {
	r, ok := s.lookup(w, req)
	if !ok {
		return
	}
	name := req.PathValue("branch")
	head, ok := r.branches[name]
	if !ok {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, branchJSON(s.URL, r, name, head))
}

func (s *Server) pull(w http.ResponseWriter, req *http.Request) {
	r, ok := s.lookup(w, req)
	if !ok {
		return
	}
	n, _ := strconv.ParseInt(req.PathValue("index"), 10, 64)
	p, ok := r.pulls[n]
	if !ok {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, pullJSON(s.URL, r, p))
}

// page is Gitea's paging of a list: ?page= from 1, ?limit= (default 30,
// at most 50, as Gitea's MAX_RESPONSE_ITEMS).
func page[T any](req *http.Request, all []T) []T {
	n, _ := strconv.Atoi(req.URL.Query().Get("page"))
	limit, _ := strconv.Atoi(req.URL.Query().Get("limit"))
	n, limit = max(n, 1), min(max(limit, 0), 50)
	if limit == 0 {
		limit = 30
	}
	from := min((n-1)*limit, len(all))
	return all[from:min(from+limit, len(all))]
}

// pulls lists pull requests, most recently updated first (?sort=
// recentupdate; the fake keeps no update times and lists by number,
// newest first), filtered by ?state= open, closed or all (default open).
func (s *Server) pulls(w http.ResponseWriter, req *http.Request) {
	r, ok := s.lookup(w, req)
	if !ok {
		return
	}
	state := req.URL.Query().Get("state")
	numbers := slices.Sorted(maps.Keys(r.pulls))
	slices.Reverse(numbers)
	out := []map[string]any{}
	var all []Pull
	for _, n := range numbers {
		if p := r.pulls[n]; state == "all" || p.State == cmp.Or(state, "open") {
			all = append(all, p)
		}
	}
	for _, p := range page(req, all) {
		out = append(out, pullJSON(s.URL, r, p))
	}
	writeJSON(w, http.StatusOK, out)
}

// listComments lists an issue's or pull request's comments, oldest first,
// those updated at or after ?since= only.
func (s *Server) listComments(w http.ResponseWriter, req *http.Request) {
	r, ok := s.lookup(w, req)
	if !ok {
		return
	}
	n, _ := strconv.ParseInt(req.PathValue("index"), 10, 64)
	if _, isPull := r.pulls[n]; !isPull && r.comments[n] == nil {
		notFound(w)
		return
	}
	var since time.Time
	if v := req.URL.Query().Get("since"); v != "" {
		since, _ = time.Parse(time.RFC3339, v)
	}
	var all []Comment
	for _, c := range r.comments[n] {
		if !c.Updated.Before(since) {
			all = append(all, c)
		}
	}
	out := []map[string]any{}
	for _, c := range page(req, all) {
		out = append(out, commentJSON(s.URL, r, n, c))
	}
	writeJSON(w, http.StatusOK, out)
}

// listReviews lists a pull request's reviews, oldest first.
func (s *Server) listReviews(w http.ResponseWriter, req *http.Request) {
	r, ok := s.lookup(w, req)
	if !ok {
		return
	}
	n, _ := strconv.ParseInt(req.PathValue("index"), 10, 64)
	if _, isPull := r.pulls[n]; !isPull {
		notFound(w)
		return
	}
	out := []map[string]any{}
	for _, c := range page(req, r.reviews[n]) {
		out = append(out, reviewJSON(s.URL, r, n, c))
	}
	writeJSON(w, http.StatusOK, out)
}

// createStatus sets a commit status, as Gitea does: 201 with the status,
// 422 for a state it does not know.
func (s *Server) createStatus(w http.ResponseWriter, req *http.Request) {
	r, ok := s.lookup(w, req)
	if !ok {
		return
	}
	var in struct {
		State       string `json:"state"`
		TargetURL   string `json:"target_url"`
		Description string `json:"description"`
		Context     string `json:"context"`
	}
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": err.Error(), "url": s.URL + "/api/swagger"})
		return
	}
	switch in.State {
	case "pending", "success", "error", "failure", "warning":
	default:
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "invalid state", "url": s.URL + "/api/swagger"})
		return
	}
	sha := req.PathValue("sha")
	s.mu.Lock()
	key := strings.ToLower(r.fullName) + "@" + strings.ToLower(sha)
	s.statuses[key] = append(s.statuses[key], CommitStatus{State: in.State, Description: in.Description, TargetURL: in.TargetURL, Context: in.Context})
	id := int64(len(s.statuses[key]))
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, statusJSON(s.URL, r, sha, id, in.State, in.Description, in.TargetURL, in.Context))
}

func (s *Server) repo(w http.ResponseWriter, req *http.Request) {
	if r, ok := s.lookup(w, req); ok {
		writeJSON(w, http.StatusOK, repoJSON(s.URL, r))
	}
}

// notFound is Gitea's 404 body.
func notFound(w http.ResponseWriter) {
	writeJSON(w, http.StatusNotFound, map[string]any{"errors": nil, "message": "The target couldn't be found.", "url": "/api/swagger"})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

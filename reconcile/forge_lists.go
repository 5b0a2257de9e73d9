package reconcile

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"code.gitea.io/sdk/gitea"

	"github.com/checkpointd/checkpointd"
)

// The calls that look for what a pending mutation made (mutation.go). Each
// reads a list page by page, at most listPages pages of listPageSize, and
// stops at the first match or the first short page: one bounded call.
const (
	listPageSize = 50
	listPages    = 5
)

// Found is what a list search found: the first match, or none. Truncated
// says the list went on past the pages read, so "none" is not an answer.
type Found struct {
	Exists    bool
	ID        int64  // a comment's or review's id
	Number    int64  // a pull request's number
	URL       string // where people see it
	State     string // a pull request's: open, closed, merged
	Head      string // a pull request's head commit
	Truncated bool
}

// searchPages calls page(n) for n = 1…listPages until it reports a match
// or returns fewer than listPageSize items.
func searchPages(page func(n int) (items int, found Found, err error)) (Found, error) {
	for n := 1; n <= listPages; n++ {
		items, found, err := page(n)
		if err != nil || found.Exists {
			return found, err
		}
		if items < listPageSize {
			return Found{}, nil
		}
	}
	return Found{Truncated: true}, nil
}

func listOptions(n int) gitea.ListOptions { return gitea.ListOptions{Page: n, PageSize: listPageSize} }

func (g *giteaForge) PullFromBranch(owner, repo, branch string) (Found, error) {
	full := owner + "/" + repo
	return searchPages(func(n int) (int, Found, error) {
		pulls, resp, err := g.c.ListRepoPullRequests(owner, repo, gitea.ListPullRequestsOptions{
			ListOptions: listOptions(n), State: gitea.StateAll, Sort: "recentupdate"})
		if err != nil {
			return 0, Found{}, forgeError(resp, err)
		}
		for _, pr := range pulls {
			// A fork's branch of the same name is not the session's.
			if pr == nil || pr.Head == nil || pr.Head.Ref != branch ||
				(pr.Head.Repository != nil && !strings.EqualFold(pr.Head.Repository.FullName, full)) {
				continue
			}
			state := string(pr.State)
			if pr.HasMerged {
				state = "merged"
			}
			return len(pulls), Found{Exists: true, Number: pr.Index, URL: pr.HTMLURL, State: state, Head: strings.ToLower(pr.Head.Sha)}, nil
		}
		return len(pulls), Found{}, nil
	})
}

func (g *giteaForge) CommentWithMarker(owner, repo string, number int64, since time.Time, key string) (Found, error) {
	return searchPages(func(n int) (int, Found, error) {
		comments, resp, err := g.c.ListIssueComments(owner, repo, number, gitea.ListIssueCommentOptions{
			ListOptions: listOptions(n), Since: since})
		if status(resp) == http.StatusNotFound {
			return 0, Found{}, &ForgeError{Status: http.StatusNotFound, Err: errors.New("no such issue or pull request")}
		}
		if err != nil {
			return 0, Found{}, forgeError(resp, err)
		}
		for _, c := range comments {
			if c != nil && checkpointd.HasMarker(c.Body, key) {
				return len(comments), Found{Exists: true, ID: c.ID, URL: c.HTMLURL}, nil
			}
		}
		return len(comments), Found{}, nil
	})
}

func (g *giteaForge) ReviewWithMarker(owner, repo string, pr int64, key string) (Found, error) {
	return searchPages(func(n int) (int, Found, error) {
		reviews, resp, err := g.c.ListPullReviews(owner, repo, pr, gitea.ListPullReviewsOptions{ListOptions: listOptions(n)})
		if status(resp) == http.StatusNotFound {
			return 0, Found{}, &ForgeError{Status: http.StatusNotFound, Err: errors.New("no such pull request")}
		}
		if err != nil {
			return 0, Found{}, forgeError(resp, err)
		}
		for _, r := range reviews {
			if r != nil && checkpointd.HasMarker(r.Body, key) {
				return len(reviews), Found{Exists: true, ID: r.ID, URL: r.HTMLURL}, nil
			}
		}
		return len(reviews), Found{}, nil
	})
}

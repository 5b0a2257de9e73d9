package forgetest

import (
	"encoding/json"
	"strings"
	"time"
)

// template decodes one of the captured Gitea objects afresh.
func template(name string) map[string]any {
	b, err := templates.ReadFile("testdata/" + name)
	if err != nil {
		panic(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(err)
	}
	return m
}

// repoJSON is a repository as GET /repos/{owner}/{name} returns it.
func repoJSON(base string, r repo) map[string]any {
	m := template("repo.json")
	owner, name, _ := strings.Cut(r.fullName, "/")
	m["id"], m["name"], m["full_name"] = r.id, name, r.fullName
	m["html_url"] = base + "/" + r.fullName
	m["url"] = base + "/api/v1/repos/" + r.fullName
	m["clone_url"] = base + "/" + r.fullName + ".git"
	m["languages_url"] = base + "/api/v1/repos/" + r.fullName + "/languages"
	o := m["owner"].(map[string]any)
	o["login"], o["username"] = owner, owner
	return m
}

// branchJSON is a branch as GET /repos/{owner}/{name}/branches/{branch}
// returns it: the head is commit.id.
func branchJSON(base string, r repo, name, head string) map[string]any {
	m := template("branch.json")
	m["name"] = name
	c := m["commit"].(map[string]any)
	c["id"] = head
	c["url"] = base + "/" + r.fullName + "/commit/" + head
	return m
}

// pullJSON is a pull request as GET /repos/{owner}/{name}/pulls/{n}
// returns it: state open or closed, merged, head.ref and head.sha.
func pullJSON(base string, r repo, p Pull) map[string]any {
	m := template("pull.json")
	html := base + "/" + r.fullName + "/pulls/" + itoa(p.Number)
	m["id"], m["number"], m["url"], m["html_url"] = p.Number, p.Number, html, html
	m["diff_url"], m["patch_url"] = html+".diff", html+".patch"
	m["state"], m["merged"] = p.State, p.Merged
	if !p.Merged {
		m["merged_at"], m["merge_commit_sha"], m["merged_by"] = nil, nil, nil
	}
	if p.State == "open" {
		m["closed_at"] = nil
	}
	head := m["head"].(map[string]any)
	head["label"], head["ref"], head["sha"], head["repo_id"] = p.HeadRef, p.HeadRef, p.HeadSHA, r.id
	head["repo"] = repoJSON(base, r)
	baseRef := m["base"].(map[string]any)
	baseRef["repo_id"], baseRef["repo"] = r.id, repoJSON(base, r)
	return m
}

// commentJSON is a comment as GET /repos/{owner}/{name}/issues/{n}/comments
// returns it. No delivery captured one, so it is built with the fields of
// Gitea 1.25's swagger definition "Comment", as the SDK reads them.
func commentJSON(base string, r repo, number int64, c Comment) map[string]any {
	html := base + "/" + r.fullName + "/issues/" + itoa(number) + "#issuecomment-" + itoa(c.ID)
	at := c.Updated.UTC().Format(time.RFC3339)
	return map[string]any{"id": c.ID, "html_url": html, "pull_request_url": "", "issue_url": base + "/" + r.fullName + "/issues/" + itoa(number),
		"user": userJSON(), "original_author": "", "original_author_id": 0, "body": c.Body, "assets": []any{},
		"created_at": at, "updated_at": at}
}

// reviewJSON is a review as GET /repos/{owner}/{name}/pulls/{n}/reviews
// returns it, with the fields of the swagger definition "PullReview".
func reviewJSON(base string, r repo, number int64, c Comment) map[string]any {
	pull := base + "/" + r.fullName + "/pulls/" + itoa(number)
	return map[string]any{"id": c.ID, "user": userJSON(), "team": nil, "state": "COMMENT", "body": c.Body,
		"commit_id": "", "stale": false, "official": false, "dismissed": false, "comments_count": 0,
		"submitted_at": c.Updated.UTC().Format(time.RFC3339), "updated_at": c.Updated.UTC().Format(time.RFC3339),
		"html_url": pull + "#issuecomment-" + itoa(c.ID), "pull_request_url": pull}
}

// statusJSON is a commit status as POST /repos/{owner}/{name}/statuses/{sha}
// answers it, with the fields of the swagger definition "CommitStatus".
func statusJSON(base string, r repo, sha string, id int64, state, description, targetURL, context string) map[string]any {
	at := time.Now().UTC().Format(time.RFC3339)
	return map[string]any{"id": id, "status": state, "target_url": targetURL, "description": description,
		"url": base + "/api/v1/repos/" + r.fullName + "/statuses/" + sha, "context": context, "creator": userJSON(),
		"created_at": at, "updated_at": at}
}

// userJSON is the poster of comments and reviews: the owner of the
// captured pull request.
func userJSON() map[string]any { return template("pull.json")["user"].(map[string]any) }

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

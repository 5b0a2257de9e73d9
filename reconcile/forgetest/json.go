package forgetest

import (
	"encoding/json"
	"strings"
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

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

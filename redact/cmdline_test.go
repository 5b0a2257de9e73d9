package redact

import "testing"

// TestRedactPasswordOptions: a short option is a password only for a
// command that takes one there.
func TestRedactPasswordOptions(t *testing.T) {
	checkCases(t, []redactCase{
		{"mysql -uroot -pS3cret widgets", "mysql -uroot -p[REDACTED:query_secret] widgets"},
		{"/usr/bin/mysqldump -p'S3 cret' widgets", "/usr/bin/mysqldump -p'[REDACTED:query_secret]' widgets"},
		{`sh -c "mariadb -h db -p\"S3cret\" widgets"`, `sh -c "mariadb -h db -p\"[REDACTED:query_secret]\" widgets"`},
		{"sshpass -p S3cret ssh host", "sshpass -p [REDACTED:query_secret] ssh host"},
		{"sshpass -pS3cret scp a host:", "sshpass -p[REDACTED:query_secret] scp a host:"},
		{"mongosh mongodb://db.internal -u admin -p S3cret", "mongosh mongodb://db.internal -u admin -p [REDACTED:query_secret]"},
		{"echo ok && docker login -u agent -p S3cret registry.example.com", "echo ok && docker login -u agent -p [REDACTED:query_secret] registry.example.com"},
		{"redis-cli -a S3cret ping", "redis-cli -a [REDACTED:query_secret] ping"},
		{"ldapsearch -x -D cn=admin -w S3cret -b dc=example", "ldapsearch -x -D cn=admin -w [REDACTED:query_secret] -b dc=example"},
		{"connect uid=app pwd=S3cret", "connect uid=app pwd=[REDACTED:query_secret]"},
		// Kept: mysql's "-p X" prompts and uses database X; other commands'
		// -p, -a and -w are ports, flags and formats.
		{"mysql -p widgets", "mysql -p widgets"},
		{"mysql -u app -p -h db widgets", "mysql -u app -p -h db widgets"},
		{"mysql -p$MYSQL_PWD widgets", "mysql -p$MYSQL_PWD widgets"},
		{"ssh -p 2222 git@host && mkdir -p /tmp/x", "ssh -p 2222 git@host && mkdir -p /tmp/x"},
		{"docker run -p 8080:80 acme/widgets; docker login", "docker run -p 8080:80 acme/widgets; docker login"},
		{"mysql -h db; ssh -p 2222 host", "mysql -h db; ssh -p 2222 host"},
		{"git add -p && ls -a /tmp && curl -w '%{http_code}' https://x.example", "git add -p && ls -a /tmp && curl -w '%{http_code}' https://x.example"},
		{"PWD=/home/agent OLDPWD=/srv pwd=~/w1", "PWD=/home/agent OLDPWD=/srv pwd=~/w1"},
	})
}

package main

import "github.com/spf13/cobra"

// examples are the Examples: of each command's --help and the EXAMPLES of
// its man page, by command path; a command's own Example wins.
var examples = map[string]string{
	"coordrun": `  coordrun -- ./nightly.sh                       # the lock is named after the command line
  coordrun --servers zk1,zk2,zk3 --name nightly -- ./nightly.sh
  coordrun -q --try --conflict-exit-code 0 --name sync -- ./sync.sh   # a crontab line on every host`,
	"coordrun run": `  coordrun run --servers zk1:2181,zk2:2181,zk3:2181 --name nightly -- ./nightly.sh
  coordrun run --try -- ./report.sh              # exit 75 at once if another host holds it
  coordrun run --timeout 10m -- ./report.sh      # wait at most 10 minutes
  coordrun run --shell --name pgdump -- 'pg_dump app | gzip > /backup/app.gz'
  coordrun run -v -- ./nightly.sh                # say the lock's name, the wait, the job's end`,
	"coordrun status": `  coordrun status                                # every lock: holder, queue
  coordrun status nightly                        # one lock; exit 66 if there is no such lock
  coordrun status --json nightly`,
	"coordrun server": `  coordrun server --dev                          # a throwaway member on 127.0.0.1:2181
  coordrun server --id 1 --data-dir /var/lib/coordrun --client-addr 10.0.0.1:2181 \
    --peer-addr 10.0.0.1:2888 --peer-secret-file /etc/coordrun/peer.secret \
    --peers 1=10.0.0.1:2888,2=10.0.0.2:2888,3=10.0.0.3:2888`,
	"coordrun cron": `  coordrun cron --jobs /etc/coordrun/jobs.yaml
  coordrun cron --check --jobs /etc/coordrun/jobs.yaml   # like nginx -t: the jobs and their next firings
  coordrun cron --schedule '0 3 * * *' --name nightly -- ./nightly.sh`,
	"coordrun cron list":     `  coordrun cron list --servers zk1:2181`,
	"coordrun cron history":  `  coordrun cron history nightly --output`,
	"coordrun cron trigger":  `  coordrun cron trigger nightly`,
	"coordrun cron pause":    `  coordrun cron pause nightly`,
	"coordrun cron resume":   `  coordrun cron resume nightly`,
	"coordrun cron backfill": `  coordrun cron backfill nightly --from 2026-12-01T03:00:00Z --to 2026-12-02T03:00:00Z`,
	"coordrun ensemble status": `  coordrun ensemble status --servers zk1:2181,zk2:2181,zk3:2181
  coordrun ensemble status --wait 30s            # exit 1 unless healthy within 30s`,
	"coordrun ensemble add":           `  coordrun ensemble add 4 10.0.0.4:2888 --admin-socket /run/coordrun/admin.sock`,
	"coordrun ensemble remove":        `  coordrun ensemble remove 3 --admin-socket /run/coordrun/admin.sock`,
	"coordrun ensemble snapshot save": `  coordrun ensemble snapshot save /backup/coordrun.snap --admin-socket /run/coordrun/admin.sock`,
	"coordrun ensemble super-digest":  `  coordrun ensemble super-digest admin          # reads the password, prints super-digest: admin:...`,
	"coordrun ensemble secret":        `  coordrun ensemble secret > /etc/coordrun/peer.secret`,
	"coordrun fence check":            `  coordrun fence check --state /srv/store/fence || exit $?   # in a job run by coordrun run`,
	"coordrun fence show":             `  coordrun fence show --state /srv/store/fence`,
	"coordrun version": `  coordrun version
  coordrun --version`,
}

// addExamples gives each command of the tree its examples.
func addExamples(c *cobra.Command) {
	if ex, ok := examples[c.CommandPath()]; ok && c.Example == "" {
		c.Example = ex
	}
	for _, sub := range c.Commands() {
		addExamples(sub)
	}
}

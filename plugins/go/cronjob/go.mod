module kubewasm.dev/plugins/cronjob

go 1.26

require (
	github.com/robfig/cron/v3 v3.0.1
	kubewasm.dev/sdk v0.0.0
)

replace kubewasm.dev/sdk => ../../sdk/go

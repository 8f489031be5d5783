module kubewasm.dev/plugins/sample-controller

go 1.26

require kubewasm.dev/sdk v0.0.0

replace kubewasm.dev/sdk => ../../sdk/go

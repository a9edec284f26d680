module github.com/burrow-dev/burrow/sdk-go

go 1.24

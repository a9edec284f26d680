module burrow-examples

go 1.24

require github.com/burrow-dev/burrow/sdk-go v0.1.0

// In this repository the module is the sibling directory; a user's
// program requires the published version instead.
replace github.com/burrow-dev/burrow/sdk-go => ../../sdk-go

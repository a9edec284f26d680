package burrow

// CoreErrorCodes exposes the core's list to the tests.
var CoreErrorCodes = coreErrorCodes

// LiveObjects exposes the library's count of objects not yet freed.
var LiveObjects = liveObjects

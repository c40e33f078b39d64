package eventstore

// EachRecord is eachRecord, for the external tests that read the file.
var EachRecord = eachRecord

"""The internal representation (IR): requests, responses and stream events shared by all codecs."""

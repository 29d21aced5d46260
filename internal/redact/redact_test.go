package redact

import "testing"

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://user:secret@10.0.0.1:6379/2": "redis://xxxxx@10.0.0.1:6379/2",
		"rediss://:p@ss@host:1":               "rediss://xxxxx@host:1",
		"unix://u:pw@/run/redis.sock":         "unix://xxxxx@/run/redis.sock",
		"redis://host:6379":                   "redis://host:6379",
		"host:6379":                           "host:6379",
		"user@host:6379":                      "xxxxx@host:6379",
		"default:pw@host:6379":                "xxxxx@host:6379",
		"redis:/u:pw@host:6379":               "xxxxx@host:6379",
	} {
		if got := URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}

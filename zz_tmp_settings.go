package caddyredlock

// TEMPORARY until modes-config lands.
func (s *settings) sharedFor(method string) bool { return s.shared[method] }

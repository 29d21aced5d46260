package sim

import "strconv"

// incr is INCR key: the node's write sequence, which every grant and renewal script
// advances (redlock/rollback.go). Kept apart from command's switch to ease merges.
func (s *Server) incr(a []string) reply {
	if len(a) != 1 {
		return errArgs("INCR")
	}
	v := s.lookup(a[0])
	if v == nil {
		s.data[a[0]] = &value{s: "1", touched: s.now()}
		return integer(1)
	}
	if v.z != nil {
		return errReply(wrongType)
	}
	n, err := strconv.ParseInt(v.s, 10, 64)
	if err != nil || n == 1<<63-1 {
		return errReply("ERR value is not an integer or out of range")
	}
	v.s = strconv.FormatInt(n+1, 10)
	return integer(n + 1)
}

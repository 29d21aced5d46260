package main

// alternate runs n variants for the given number of rounds, forwards in even rounds and
// backwards in odd ones (ABC CBA ABC ...), so slow drift of the machine hits every
// variant alike. run(i, round) measures variant i once.
func alternate(rounds, n int, run func(i, round int)) {
	for r := range rounds {
		for k := range n {
			i := k
			if r%2 == 1 {
				i = n - 1 - k
			}
			run(i, r)
		}
	}
}

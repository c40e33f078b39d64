package faq

// SharesTopic reports whether text takes up a topic term of question (a
// word that is not a stop word, or a Japanese compound), as an answer to
// it does; a question with no topic term ("hello", 「ありがとう」) is
// taken up by any text. It tells a model's answer from a reply that
// answered something else, such as a greeting or a list of what the
// assistant can do.
func SharesTopic(question, text string) bool {
	var terms []string
	for _, t := range tokenize(question) {
		if t.weight == 1 {
			terms = append(terms, t.term)
		}
	}
	if len(terms) == 0 {
		return true
	}
	in := map[string]bool{}
	for _, t := range tokenize(text) {
		in[t.term] = true
	}
	for _, t := range terms {
		if in[t] {
			return true
		}
	}
	return false
}

# dataplane/tokenizer — (empty until its module lands)

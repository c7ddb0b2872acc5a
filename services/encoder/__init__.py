"""The shared media encoder service: a request's media parts (raw files, prompt order) -> every part's rows,
with the towers a model's encoder hook gives, on the stateless engine."""

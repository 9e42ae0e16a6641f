"""Binding: the Binder and RankTablePublisher ports and the direct binder (nominations, fence, posts, rooms)."""

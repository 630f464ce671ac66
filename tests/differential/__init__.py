"""Differential tests: the same scripts against real beanstalkd 1.12 and haqueue, replies compared byte for byte."""

import streamlit as st

st.title("cache (coming)")

import streamlit as st

st.title("memory (coming)")

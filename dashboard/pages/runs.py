import streamlit as st

st.title("runs (coming)")
